"""What `ner serve` takes on: a bound on the texts it holds, a deadline a request, and the stop.

Backpressure. The server holds at most `max_queue` texts: accepted (validated and queued to the
workers) and not yet answered, those being tagged included. The bound holds over all the HTTP
processes together: they share one counter in shared memory (created before LitServe forks them).
A request that would take the count past the bound is answered at once with 503, a `Retry-After`
(the seconds the workers need to tag what is held, at the speed measured at start-up) and a
one-line JSON error; the texts already held are tagged as before. A request larger than the bound
is taken when the server holds nothing else, so every valid request can be served.

Deadline. A request not answered `deadline` seconds after it was queued gets a one-line 504: the
HTTP process stops waiting then (whatever the worker is doing), and a worker drops a request that
waited that long before it was taken (`ner.serving.batcher.PoolingLoop`), with the same message.
So an accepted request is answered, 200 or 504, within the deadline, and a stop drains within it.

Stop. Once `stop()` is called (SIGTERM, `ner.serving.server.serve`) every new request gets a
503; what is held is answered.
"""

from __future__ import annotations

import math
import multiprocessing
from dataclasses import asdict, dataclass
from typing import Any

from ner.serving.api import RequestError

DEADLINE = 30.0  # seconds
DRAIN_MARGIN = 5.0  # seconds a stop may take beyond the deadline (the HTTP processes' own end)


def late_message(deadline: float) -> str:
    """The one error of a request past its deadline, whichever process notices."""
    return (
        f"deadline: not answered within {deadline:g} s of being queued (ner serve --deadline);"
        " the server is overloaded, retry later"
    )


def default_max_queue(rate: float, workers: int, deadline: float, max_batch_size: int) -> int:
    """The bound `ner serve` takes by default: the texts the workers tag in half the deadline at
    `rate` texts a second each (measured at start-up), and at least a full batch a worker. Half:
    real texts may be slower than the measured ones, and a request accepted last must still be
    answered within the deadline."""
    return max(workers * max_batch_size, math.floor(workers * rate * deadline / 2))


@dataclass(frozen=True)
class Policy:
    """What the server takes on.

    Args:
        max_queue: texts held at most (accepted, not yet answered) over all HTTP processes;
            None: no bound.
        deadline: seconds a request may wait for its answer after being queued (then 504).
        drain_timeout: seconds a stop waits for the held requests to be answered; None: the
            deadline plus `DRAIN_MARGIN`.
        rate: texts a second all the workers tag (an estimate, for `Retry-After`); None: unknown.
    """

    max_queue: int | None = None
    deadline: float = DEADLINE
    drain_timeout: float | None = None
    rate: float | None = None

    @property
    def drain(self) -> float:
        """The seconds a stop waits at most."""
        given = self.drain_timeout
        return given if given is not None else self.deadline + DRAIN_MARGIN

    def as_dict(self) -> dict[str, Any]:
        """The policy for `/info`."""
        return {**asdict(self), "drain_timeout": self.drain, "scope": "all HTTP processes"}


class Busy(RequestError):
    """A request refused for now (503), with the seconds after which to retry."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(503, message)
        self.retry_after = retry_after


class Admission:
    """The count of held texts and the stop flag, shared by every HTTP process of a server."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self._held = multiprocessing.Value("q", 0)  # with a lock: processes add and take away
        self._stopping = multiprocessing.RawValue("b", 0)  # set once, read without a lock

    @property
    def held(self) -> int:
        """Texts held now."""
        return self._held.value

    def retry_after(self, held: int) -> int:
        """Seconds the workers need for `held` texts (1 when the speed is unknown)."""
        rate = self.policy.rate
        seconds = math.ceil(held / rate) if rate else 1
        return min(max(seconds, 1), math.ceil(self.policy.deadline))

    def admit(self, texts: int) -> None:
        """Hold `texts` more texts, or raise `Busy` (the server is full or stopping)."""
        if self._stopping.value:
            raise Busy("server stopping: it takes no new requests", math.ceil(self.policy.drain))
        bound = self.policy.max_queue
        with self._held.get_lock():
            held = self._held.value
            if bound is None or held == 0 or held + texts <= bound:
                self._held.value = held + texts
                return
        wait = self.retry_after(held)
        raise Busy(
            f"server busy: {held:,} texts queued and this request's {texts:,} would pass"
            f" --max-queue {bound:,}; retry after {wait} s", wait,
        )  # fmt: skip

    def release(self, texts: int) -> None:
        """The `texts` of a request are answered."""
        with self._held.get_lock():
            self._held.value -= texts

    def stop(self) -> None:
        """Refuse every request from now on."""
        self._stopping.value = 1

    def state(self) -> dict[str, Any]:
        """What `/info` says of the queue now."""
        return {"held_texts": self.held, "stopping": bool(self._stopping.value)}
