"""`ner serve CKPT`: tag over HTTP (LitServe), with dynamic batching and a page at `/ui/`.

The model is loaded here first, so a bad checkpoint is a one-line error before any process
starts (and an ONNX export is made once, not by each worker); LitServe then loads it again in
each worker process. `ner.serving.server` has the app, `ner.serving.batcher` the workers,
`ner.serving.api` the requests and answers, `ner.serving.admission` what the server takes on:
the bound on held texts (by default sized from the speed of the model loaded here), the deadline
a request and the drain on SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import socket
import sys
from functools import partial
from typing import Any

import torch

from ner.cli.main import summary
from ner.cli.model_card import card_of
from ner.utils.errors import NERError
from ner.utils.extras import require

require("serve", "ner serve")  # before the imports below need litserve: one line, not a traceback

from ner.inference.backend_table import add_backend_arguments  # noqa: E402
from ner.inference.backends import ExportedTagger  # noqa: E402
from ner.inference.routine import Tagger  # noqa: E402
from ner.model.checkpoint import module_spec  # noqa: E402
from ner.serving.admission import DEADLINE, DRAIN_MARGIN, Policy, default_max_queue  # noqa: E402
from ner.serving.api import OFFSET_UNIT, Limits  # noqa: E402
from ner.serving.batcher import warm_rate  # noqa: E402
from ner.serving.loader import load_model  # noqa: E402
from ner.serving.server import HOSTS, build_server, serve  # noqa: E402

# Small pooled batches gain little from intra-op threads, and threads that wait on each other
# lose much when a core is busy elsewhere: on a CPU, workers of a few threads each serve more.
AUTO_WORKERS = 4


def parser() -> argparse.ArgumentParser:
    """The options of `ner serve`."""
    p = argparse.ArgumentParser(prog="ner serve", description=summary("serve"))
    p.add_argument("checkpoint", help="a checkpoint, or a folder written by `ner export`")
    p.add_argument("--host", choices=HOSTS, default="127.0.0.1", help="the address to listen on")
    p.add_argument("--port", type=int, default=8000, help="the port (1024-65535)")
    add_backend_arguments(p)
    p.add_argument("--device", default="auto", help="auto (a GPU if there is one), cpu, cuda:N")
    p.add_argument(
        "--max-batch-size", type=int, default=64,
        help="texts tagged together at most: concurrent requests are pooled up to it",
    )  # fmt: skip
    p.add_argument(
        "--batch-timeout", type=float, default=0.0,
        help="seconds a request waits at most for others to join its batch (0: the worker takes"
        " what is queued; requests that arrive while it tags form the next batch)",
    )  # fmt: skip
    p.add_argument(
        "--max-pieces", type=int, default=None,
        help="padded pieces a batch at most (default: the routine's budget for the device, as"
        " ner tag; smaller can be faster for small pooled batches)",
    )  # fmt: skip
    p.add_argument(
        "--workers", type=int, default=None,
        help=f"inference processes, a model each (default: on a CPU one a core, at most"
        f" {AUTO_WORKERS}; on a GPU 1)",
    )  # fmt: skip
    p.add_argument(
        "--threads", type=int, default=None,
        help="torch / ONNX Runtime threads a worker (default: CPUs / workers; on a GPU with one"
        " worker, torch's default)",
    )  # fmt: skip
    p.add_argument(
        "--max-chars", type=int, default=Limits.max_chars,
        help="characters a request at most (longer: 413); texts of any length up to it",
    )  # fmt: skip
    p.add_argument(
        "--max-texts", type=int, default=Limits.max_texts, help="texts a request at most"
    )
    p.add_argument(
        "--max-queue", type=int, default=None,
        help="texts the server holds at most, accepted and not yet answered, over all its HTTP"
        " processes; past it a request gets 503 with Retry-After at once (default: the texts the"
        " workers tag in half the --deadline at the speed measured at start-up on a long"
        " sentence, at least a full batch a worker)",
    )  # fmt: skip
    p.add_argument(
        "--deadline", type=float, default=DEADLINE,
        help="seconds a request may wait for its answer once queued; then 504",
    )  # fmt: skip
    p.add_argument(
        "--drain-timeout", type=float, default=None,
        help="on SIGTERM, seconds to answer the requests already accepted (new ones are refused)"
        f" before the processes end (default: --deadline + {DRAIN_MARGIN:g})",
    )  # fmt: skip
    return p


def check(args: argparse.Namespace) -> None:
    """One-line errors for values out of range, and for a port that cannot be listened on."""
    counts = ("max_batch_size", "workers", "max_chars", "max_texts", "threads", "max_pieces",
              "max_queue")  # fmt: skip
    for name in counts:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise NERError(f"must be at least 1, not {value}", path="--" + name.replace("_", "-"))
    if args.batch_timeout < 0:
        raise NERError(f"must be >= 0, not {args.batch_timeout}", path="--batch-timeout")
    for name in ("deadline", "drain_timeout"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise NERError(f"must be > 0, not {value}", path="--" + name.replace("_", "-"))
    if args.batch_timeout >= args.deadline:
        raise NERError(
            f"must be under --deadline ({args.deadline:g}), not {args.batch_timeout:g}",
            path="--batch-timeout",
        )
    if not 1024 <= args.port <= 65535:
        raise NERError(f"must be from 1024 to 65535, not {args.port}", path="--port")
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((args.host, args.port))
        except OSError as exc:
            raise NERError(f"cannot listen on {args.host}:{args.port} ({exc.strerror})") from None


def processes(args: argparse.Namespace, device: str) -> tuple[int, int | None]:
    """(workers, threads a worker): as given, else one worker a CPU core (at most
    `AUTO_WORKERS`) sharing the cores, or one worker on a GPU with torch's default threads."""
    cpus = os.cpu_count() or 1
    workers = args.workers or (1 if device == "cuda" else min(cpus, AUTO_WORKERS))
    if args.threads or (device == "cuda" and workers == 1):
        return workers, args.threads
    return workers, max(1, cpus // workers)


def admission(
    tagger: Tagger, args: argparse.Namespace, workers: int, threads: int | None
) -> Policy:
    """The admission policy: as given, the bound by default from the speed of `tagger` on
    `threads` threads (a worker's), times `workers` (`admission.default_max_queue`)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        rate = warm_rate(tagger, args.max_batch_size, args.max_pieces)
    finally:
        torch.set_num_threads(before)
    bound = args.max_queue or default_max_queue(rate, workers, args.deadline, args.max_batch_size)
    return Policy(bound, args.deadline, args.drain_timeout, round(rate * workers, 1))


def describe(tagger: Tagger, args: argparse.Namespace) -> dict[str, Any]:
    """What `/info` says of the model."""
    exported = isinstance(tagger, ExportedTagger)
    return {
        "checkpoint": os.path.abspath(args.checkpoint),
        "version": importlib.metadata.version("ner"),
        "labels": list(tagger.labels),
        "types": sorted({label[2:] for label in tagger.labels if label != "O"}),
        "encoder": None if exported else tagger.encoder_name,
        "combiner": None if exported else module_spec(tagger.combiner),
        "window_settings": tagger.window_settings.as_dict(),
        "backend": "onnx" if exported else args.backend,
        "quantize": args.quantize,
        "device": str(next(tagger.parameters()).device),
        "offset_unit": OFFSET_UNIT,
        "model_card": str(card.resolve()) if (card := card_of(args.checkpoint)) else None,
    }


def main(argv: list[str]) -> int:
    """Serve until SIGINT or SIGTERM."""
    args = parser().parse_args(argv)
    check(args)
    tagger = load_model(args.checkpoint, args.backend, args.quantize, args.device)
    info = describe(tagger, args)
    workers, threads = processes(args, next(tagger.parameters()).device.type)
    policy = admission(tagger, args, workers, threads)
    del tagger  # each worker loads its own
    loader = partial(load_model, args.checkpoint, args.backend, args.quantize, args.device)
    limits = Limits(args.max_chars, args.max_texts)
    server = build_server(
        loader, info, limits, args.max_batch_size, args.batch_timeout, workers, threads,
        args.max_pieces, policy,
    )  # fmt: skip
    print(
        f"ner serve: loading the model in {workers} worker(s) of {threads or 'default'} thread(s);"
        f" at most {policy.max_queue:,} texts held (about {policy.rate:g} texts/s measured), a"
        f" {policy.deadline:g} s deadline",
        file=sys.stderr,
    )
    serve(server, args.host, args.port)
    print("ner serve: stopped", file=sys.stderr)
    return 0
