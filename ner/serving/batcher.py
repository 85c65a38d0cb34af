"""The inference worker of `ner serve`: a LitServe `LitAPI` that tags pooled requests, and the
loop that pools them.

`PoolingLoop` blocks until a request is queued, then takes whatever else is queued, and waits
for more only while the first request is younger than `batch_timeout` (default 0: no wait): the
batch closes when it holds `max_batch_size` texts (not requests: one request may carry many) or
at that deadline, whichever comes first. Under load, requests queue while the worker tags, so
batches fill without waiting; alone, a request waits at most `batch_timeout`. The pooled texts
then go through THE inference routine as one input (`ner.serving.api.tag_requests`), batched as
`ner tag` batches (`ner.inference.routine.warm_up` runs each batch shape when a worker loads).

A request that waited past the server's deadline (LitServe's `request_timeout`, `ner serve
--deadline`) before a worker took it is not tagged: the worker answers it a one-line 504 at once,
the message the HTTP process gives when it stops waiting (`ner.serving.admission`).

Between batches, every `TRIM_SECONDS` at most, a worker that tagged hands the memory freed since
back to the system (glibc's `malloc_trim`): glibc keeps what tensors of ever-changing sizes free,
so a busy worker's RSS would otherwise creep up for hours without any object being kept.
"""

from __future__ import annotations

import ctypes
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from queue import Empty, Queue
from typing import Any

import litserve as ls
import torch
from litserve.loops.simple_loops import BatchedLoop
from litserve.utils import LitAPIStatus, LoopResponseType

from ner.inference.routine import Tagger, warm_up
from ner.serving.admission import late_message
from ner.serving.api import tag_requests
from ner.utils.errors import first_line

WARMUP = {"items": ["Warm up on one short sentence in London ."], "word_tags": False}
TRIM_SECONDS = 5.0
MALLOC_TRIM = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc only
# what `warm_rate` times: a long news sentence (35 words), so that most texts tag faster
TIMED = (
    "The chairman of Deutsche Bank , Hilmar Kopper , told reporters in Frankfurt on Tuesday that"
    " the bank would open offices in London , New York and Tokyo before the end of next year ."
)


def failure(exc: Exception) -> dict[str, Any]:
    """The answer to a request that could not be tagged: a bug, so its traceback goes to the
    log, and the request alone gets a one-line 500 (`ner.serving.server` answers it)."""
    traceback.print_exception(exc, file=sys.stderr)
    return {"error": f"could not tag this request ({type(exc).__name__}: {first_line(exc)})",
            "status": 500}  # fmt: skip


class PoolingLoop(BatchedLoop):
    """LitServe's batched loop with our pooling rule and memory trim (see the module's
    docstring)."""

    def __init__(self):
        super().__init__()
        self._tagged, self._trimmed = False, 0.0

    def _trim(self) -> None:
        """Hand freed memory back to the system, if a batch was tagged since the last time and
        that was `TRIM_SECONDS` ago."""
        if MALLOC_TRIM and self._tagged and time.monotonic() - self._trimmed >= TRIM_SECONDS:
            MALLOC_TRIM(0)
            self._tagged, self._trimmed = False, time.monotonic()

    def _next(self, queue: Queue, timeout: float) -> tuple | None:
        """The next queued request, waiting up to `timeout` seconds (not at all if <= 0)."""
        try:
            item = queue.get(timeout=timeout) if timeout > 0 else queue.get_nowait()
        except Empty:
            return None
        except (EOFError, ConnectionError):  # the queue's manager ended: the server is stopping
            raise SystemExit(0) from None  # this worker ends with it, quietly
        return item if item[1] is not None else None  # LitServe's stop sentinel: no request

    def get_batch_requests(self, lit_api: ls.LitAPI, request_queue: Queue, transport: Any):
        """(requests to tag, []): those that waited past the server's deadline are answered
        here (a 504 in our words; LitServe would answer the ones returned second with its own)."""
        self._trim()
        first = self._next(request_queue, 1.0)  # blocks in the queue's server, not a busy poll
        if first is None:
            return [], []
        taken, texts = [first], len(first[3]["items"])
        deadline = first[2] + lit_api.batch_timeout  # its enqueue time (a system-wide clock)
        while texts < lit_api.max_batch_size:
            item = self._next(request_queue, deadline - time.monotonic())
            if item is None:
                break
            taken.append(item)
            texts += len(item[3]["items"])
        limit = lit_api.request_timeout
        now, batch = time.monotonic(), []
        for queue_id, uid, enqueued, payload in taken:
            if limit not in (None, False, -1) and now - enqueued > limit:
                late = {"error": late_message(limit), "status": 504}
                self.put_response(
                    transport, queue_id, uid, late, LitAPIStatus.OK, LoopResponseType.REGULAR
                )
                continue
            self.put_response(
                transport, queue_id, uid, (), LitAPIStatus.START, LoopResponseType.REGULAR
            )  # a no-op unless LitServe restarts workers; then it tells which worker has it
            batch.append((queue_id, uid, payload))
        self._tagged = self._tagged or bool(batch)
        return batch, []


class TaggingAPI(ls.LitAPI):
    """Tags validated requests (`ner.serving.api.parse_request`) in pooled batches.

    Args:
        loader: a picklable callable returning the `Tagger` (LitServe builds it in each worker
            process, which it spawns).
        max_batch_size: texts pooled into one batch at most; also the routine's sentences a batch.
        batch_timeout: seconds a request may wait for others to join its batch.
        threads: torch (and ONNX Runtime) threads of the worker; None: torch's default.
        max_pieces: padded pieces a batch (None: the routine's budget for the device).
    """

    def __init__(
        self,
        loader: Callable[[], Tagger],
        max_batch_size: int = 64,
        batch_timeout: float = 0.0,
        threads: int | None = None,
        max_pieces: int | None = None,
    ):
        super().__init__(
            max_batch_size=max_batch_size, batch_timeout=batch_timeout, loop=PoolingLoop()
        )
        self.loader, self.threads, self.max_pieces = loader, threads, max_pieces
        self.model: Tagger | None = None

    def setup(self, device: str) -> None:
        """Load the model in this worker and tag one sentence, so the first request is not slow.
        LitServe's `device` is ignored: the loader puts the model where it belongs."""
        # Ctrl-C reaches the whole process group; the server stops its workers itself
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if self.threads:
            torch.set_num_threads(self.threads)
        self.model = self.loader()
        warm_up(self.model, self.max_batch_size, self.max_pieces)

    def decode_request(self, request: dict[str, Any]) -> dict[str, Any]:
        return request  # validated by the HTTP process (ner.serving.server)

    def batch(self, inputs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return list(inputs)

    def predict(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One answer a request, all tagged together. Should tagging fail (a bug), each request
        is tagged again alone, so only one that fails by itself gets an error (`failure`)."""
        try:
            return self._tag(requests)
        except Exception as exc:  # noqa: BLE001  (any bug: the pooled requests must not share it)
            if len(requests) == 1:
                return [failure(exc)]
        return [self._alone(request) for request in requests]

    def _tag(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return tag_requests(
            self.model, requests, batch_size=self.max_batch_size, max_pieces=self.max_pieces
        )

    def _alone(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._tag([request])[0]
        except Exception as exc:  # noqa: BLE001
            return failure(exc)

    def unbatch(self, output: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return output

    def encode_response(self, output: dict[str, Any]) -> dict[str, Any]:
        return output  # the HTTP process writes the JSON


def warm_rate(model: Tagger, max_batch_size: int, max_pieces: int | None = None) -> float:
    """Texts a second `model` tags in full batches of a long sentence (`TIMED`), on this
    process's torch threads: what `ner serve` sizes its queue by (`ner.serving.admission`)."""
    request = {"items": [TIMED] * max_batch_size, "word_tags": False}
    tag_requests(model, [WARMUP])  # the first call pays for lazy set-up
    start = time.perf_counter()
    tag_requests(model, [request], batch_size=max_batch_size, max_pieces=max_pieces)
    return max_batch_size / (time.perf_counter() - start)
