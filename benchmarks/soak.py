"""Soak test of `ner serve` on 127.0.0.1: steady clients plus overload bursts, for minutes.

    ner bench soak [--ckpt PATH] [--seconds 600] [--clients 64] [--warmup 30]
        [--window 10] [--burst-every S] [--burst-seconds 5] [--serve-args "..."] [--smoke]
        [--out PATH]

The real `ner serve CKPT` (no --ckpt: an untrained tagger on --encoder), eng.testb sentences one
a request. Warm-up: --clients closed-loop clients (httpx); their answers a second: the capacity.
Soak: the same clients (told 503, one waits its Retry-After), every --burst-every s open-loop
requests at 4x the capacity for --burst-seconds. A --window s: answered (200), refused (503),
failed (else: must be 0), p50/p99 latency of the answered, p99 of GET /health, the RSS of every
server process (psutil). RSS growth: the end over the warm-up's end (target <= 10%). Then SIGTERM:
seconds to end, processes left. --out: the JSON record, with the machine, versions, commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import headline, load_sentences, parse, parser, report
from benchmarks.serve import free_port, start, stop, wait_ready

SMOKE = {"seconds": 4.0, "warmup": 1.5, "window": 1.0, "burst_seconds": 0.5, "sample": 0.25}
BURST = 4  # a burst sends this many times the measured capacity
HEADERS = ["window", "from s", "burst", "answered", "refused", "failed", "p50 ms", "p99 ms",
           "health p99 ms", "RSS MiB"]  # fmt: skip
PACKAGES = ("ner", "torch", "transformers", "litserve", "uvicorn", "fastapi", "httpx", "psutil")


@dataclass
class Outcome:
    """A request: when answered, status, seconds; a 503's Retry-After and whether it was proper."""

    done: float
    status: int | str
    seconds: float
    retry_after: int = 0
    proper: bool = True


def sample(port: int, pid: int, origin: float, every: float, halt: threading.Event, into: dict):
    """Every `every` s until `halt`: the RSS of every server process (MiB, by pid with its role)
    and their sum, into `into["rss"]`; GET /health's seconds (None: failed), into `["health"]`."""
    import httpx
    import psutil

    while not halt.wait(every):
        root, processes = psutil.Process(pid), {}
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):  # ended meanwhile
                role = "main" if p is root else "fork"  # LitServe's manager, an HTTP process
                role = "worker" if "spawn_main" in " ".join(p.cmdline()) else role
                processes[p.pid] = {"role": role, "rss_mib": p.memory_info().rss / 2**20}
        total = sum(p["rss_mib"] for p in processes.values())
        into["rss"].append(dict(t=time.monotonic() - origin, total_mib=total, by_pid=processes))
        sent = time.monotonic()
        try:
            ok = httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).status_code == 200
        except httpx.HTTPError:
            ok = False
        into["health"].append((sent - origin, time.monotonic() - sent if ok else None))


class Load:
    """The load generator: steady closed-loop clients and open-loop bursts, on one httpx client."""

    def __init__(self, http, port: int, texts: list[str], origin: float):
        self.http, self.url, self.texts = http, f"http://127.0.0.1:{port}/predict", texts
        self.origin, self.outcomes, self.pending, self.sent = origin, [], set(), 0

    def now(self) -> float:
        return time.monotonic() - self.origin

    async def one(self) -> Outcome:
        """One request; its outcome recorded."""
        import httpx

        text, self.sent = self.texts[self.sent % len(self.texts)], self.sent + 1
        sent, retry, proper = time.monotonic(), 0, True
        try:
            response = await self.http.post(self.url, json={"text": text})
            status, header = response.status_code, response.headers.get("retry-after", "")
            if status == 503:
                retry = int(header) if header.isdigit() else 1
                one_line = "\n" not in response.text.strip()
                proper = header.isdigit() and list(response.json()) == ["error"] and one_line
        except (httpx.HTTPError, ValueError) as exc:
            status = type(exc).__name__
        self.outcomes.append(Outcome(self.now(), status, time.monotonic() - sent, retry, proper))
        return self.outcomes[-1]

    async def steady(self, until: float) -> None:
        """A client sending its next request when the last is answered; told 503, it waits."""
        while self.now() < until:
            outcome = await self.one()
            if outcome.status == 503:
                await asyncio.sleep(min(outcome.retry_after, max(until - self.now(), 0)))

    async def bursts(self, starts: list[float], rate: float, seconds: float) -> None:
        """At each start, requests at `rate` a second for `seconds`, none waiting for another."""
        for at in starts:
            await asyncio.sleep(max(0.0, at - self.now()))
            for i in range(max(1, round(rate * seconds))):
                task = asyncio.create_task(self.one())
                self.pending.add(task)
                task.add_done_callback(self.pending.discard)
                await asyncio.sleep(max(0.0, at + (i + 1) / rate - self.now()))


async def drive(port: int, pid: int, texts: list[str], args) -> tuple[Load, dict, dict]:
    """Warm up, then soak; the load, the samples, and the plan (capacity, bursts)."""
    import httpx

    origin, halt, samples = time.monotonic(), threading.Event(), {"rss": [], "health": []}
    sampler = threading.Thread(target=sample, args=(port, pid, origin, args.sample, halt, samples))
    sampler.start()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=args.clients)
    async with httpx.AsyncClient(limits=limits, timeout=args.deadline + 30) as http:
        load, end = Load(http, port, texts, origin), args.warmup + args.seconds
        clients = [asyncio.create_task(load.steady(end)) for _ in range(args.clients)]
        await asyncio.sleep(args.warmup)
        capacity = sum(o.status == 200 for o in load.outcomes) / args.warmup
        every, length = args.burst_every, args.burst_seconds
        starts = [args.warmup + k * every for k in range(1, int(args.seconds / every) + 1)]
        starts = [s for s in starts if s + length + args.window <= end]  # the last window calm
        await load.bursts(starts, BURST * max(capacity, 1.0), length)
        await asyncio.gather(*clients, *list(load.pending))
    halt.set()
    sampler.join()
    return load, samples, {"capacity_rps": capacity, "bursts_at_s": starts}


def percentile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def windows(load: Load, samples: dict, plan: dict, args) -> list[dict]:
    """The figures of each window: the warm-up, then every --window seconds of the soak (the
    last one also holds the answers that came after the end)."""
    starts = range(max(1, round(args.seconds / args.window)))
    edges = [0.0] + [args.warmup + i * args.window for i in starts] + [float("inf")]
    found = []
    for i, (a, b) in enumerate(zip(edges, edges[1:], strict=False)):
        mine = [o for o in load.outcomes if a <= o.done < b]
        ok = [1000 * o.seconds for o in mine if o.status == 200]
        health = [s for t, s in samples["health"] if a <= t < b]
        rss = [r["total_mib"] for r in samples["rss"] if a <= r["t"] < b]
        found.append({
            "window": "warm-up" if i == 0 else i, "from_s": a,
            "burst": any(a < s + args.burst_seconds and s < b for s in plan["bursts_at_s"]),
            "answered": len(ok), "refused": sum(o.status == 503 for o in mine),
            "failed": sum(o.status not in (200, 503) for o in mine),
            "refused_improper": sum(o.status == 503 and not o.proper for o in mine),
            "p50_ms": percentile(ok, 0.5), "p99_ms": percentile(ok, 0.99),
            "health_p99_ms": percentile([1000 * s for s in health if s is not None], 0.99),
            "health_failed": health.count(None), "rss_mib": sum(rss) / len(rss) if rss else None,
        })  # fmt: skip
    return found


def rss_growth(found: list[dict], samples: dict, args) -> dict:
    """RSS at the end over RSS at the end of the warm-up, and over the first calm window after
    the first burst (what the allocators keep from a burst apart)."""
    rss = [(r["t"], r["total_mib"]) for r in samples["rss"]]
    tail = [m for t, m in rss if args.warmup - args.window <= t < args.warmup]
    seen = [w["rss_mib"] for w in found if w["rss_mib"] is not None] or [0.0]
    base, final = (sum(tail) / len(tail) if tail else seen[0]), seen[-1]
    first = next((i for i, w in enumerate(found) if w["burst"]), len(found))
    settled = next((w["rss_mib"] for w in found[first:] if not w["burst"]), None)
    return {"baseline_mib": round(base, 1), "final_mib": round(final, 1),
            "peak_mib": max((m for _, m in rss), default=None),
            "growth_pct": 100 * (final / base - 1) if base else None,
            "growth_after_first_burst_pct": 100 * (final / settled - 1) if settled else None,
            "target_pct": 10, "samples": len(rss)}  # fmt: skip


def packages() -> dict:
    """The versions of the serving stack (the record's `versions` has python, torch, ...)."""
    found = {}
    for name in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return found


def checkpoint(args, folder: Path) -> str:
    """--ckpt, or an untrained tagger on --encoder saved in `folder` (as `ner fit` saves one)."""
    if args.ckpt:
        return args.ckpt
    import torch

    from benchmarks.common import build_tagger
    from ner.model import checkpoint as ckpt

    tagger, path = build_tagger(args.encoder, seed=args.seed), folder / "untrained.ckpt"
    torch.save({"state_dict": tagger.state_dict(), "ner": ckpt.pack(tagger)}, path)
    return str(path)


def options(argv: list[str] | None):
    p = parser(__doc__.splitlines()[0], __file__)
    p.add_argument("--ckpt", help="the checkpoint to serve (default: an untrained one)")
    p.add_argument("--seconds", type=float, default=600.0, help="length of the soak")
    p.add_argument("--clients", type=int, default=64, help="steady closed-loop clients")
    p.add_argument("--warmup", type=float, default=30.0, help="seconds before the soak")
    p.add_argument("--window", type=float, default=10.0, help="seconds a window of figures")
    p.add_argument("--burst-every", type=float, help="seconds (default: 60, a third if shorter)")
    p.add_argument("--burst-seconds", type=float, default=5.0, help="length of a burst")
    p.add_argument("--sample", type=float, default=2.0, help="seconds between RSS samples")
    p.add_argument("--serve-args", default="", help="more options of ner serve, one string")
    p.add_argument("--out", dest="json", metavar="PATH", help="write the JSON record to PATH")
    args = parse(p, argv)
    for name, value in SMOKE.items() if args.smoke else ():
        if p.get_default(name) == getattr(args, name):  # what is given stays
            setattr(args, name, value)
    args.burst_every = args.burst_every or min(60.0, args.seconds / 3)
    return args


def run(args, texts: list[str]) -> dict:
    """Serve, drive, stop (SIGTERM: the seconds until every process has ended, any left)."""
    import httpx
    import psutil

    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        ckpt, port, log = checkpoint(args, tmp), free_port(), tmp / "serve.log"
        command = [sys.executable, "-m", "ner.cli.main", "serve", ckpt, "--port", str(port),
                   *args.serve_args.split()]  # fmt: skip
        proc = start(command, log)
        try:
            wait_ready(proc, port, log)
            info = httpx.get(f"http://127.0.0.1:{port}/info", timeout=30).json()["model"]
            args.deadline = info["admission"]["deadline"]
            load, samples, plan = asyncio.run(drive(port, proc.pid, texts, args))
        finally:
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            sent = time.monotonic()
            stop(proc)
            left = [p.pid for p in psutil.wait_procs(tree, timeout=60)[1]]
            ended = {"exit_code": proc.returncode, "seconds": time.monotonic() - sent, "left": left}
            server_log = log.read_text(errors="replace")[-4000:]
    found, counts = windows(load, samples, plan, args), ("answered", "refused", "failed")
    failures = sorted({str(o.status) for o in load.outcomes if o.status not in (200, 503)})
    shown = ["python", *command[1:]]  # the interpreter's path is this machine's, not the record's
    return {"serve_command": shown, "admission": info["admission"], "plan": plan,
            "totals": {k: sum(w[k] for w in found) for k in (*counts, "refused_improper")},
            "failures": failures, "rss": rss_growth(found, samples, args), "stop": ended,
            "windows": found, "rss_samples": samples["rss"], "health_samples": samples["health"],
            "server_log_tail": server_log}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = options(argv)
    texts = [" ".join(words) for words, _ in load_sentences("testb", 64 if args.smoke else None)]
    figures = run(args, texts)
    plan, growth, ended = figures["plan"], figures["rss"], figures["stop"]
    rows = [[w["window"], w["from_s"], "yes" if w["burst"] else "", w["answered"], w["refused"],
             w["failed"]] + ["-" if w[k] is None else w[k] for k in ("p50_ms", "p99_ms",
             "health_p99_ms", "rss_mib")] for w in figures["windows"]]  # fmt: skip
    notes = [
        f"{len(texts)} eng.testb sentences, one a request; checkpoint {args.ckpt or 'untrained'};"
        f" ner serve {args.serve_args}; admission {json.dumps(figures['admission'])}",
        f"warm-up {args.warmup:g} s, soak {args.seconds:g} s, {args.clients} steady clients;"
        f" capacity {plan['capacity_rps']:.1f} requests/s; bursts of {BURST}x it for"
        f" {args.burst_seconds:g} s from {', '.join(f'{s:.0f}' for s in plan['bursts_at_s'])} s",
        f"totals {json.dumps(figures['totals'])}; failures: {figures['failures'] or 'none'}",
        f"RSS of the server processes (shared pages in each): {growth['baseline_mib']} MiB after"
        f" warm-up, {growth['final_mib']} at the end: {growth['growth_pct'] or 0:+.1f}% (<= 10%)",
        f"SIGTERM: ended in {ended['seconds']:.1f} s, exit code {ended['exit_code']}, processes"
        f" left: {ended['left'] or 'none'}; the load generator shares the machine's CPUs",
    ]
    top = headline("ner serve: RSS growth over a soak with overload bursts (target <= 10)", "%",
                   ("ner serve", growth["growth_pct"] or 0.0))  # fmt: skip
    extra = {"packages": packages(), **figures}
    report("soak: ner serve under steady load and bursts", HEADERS, rows, notes, args, extra, top)


if __name__ == "__main__":
    main()
