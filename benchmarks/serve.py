"""Load test of `ner serve` on 127.0.0.1: eng.testb sentences as one-sentence requests.

    ner bench serve --ckpt PATH [--backend onnx] [--quantize int8] [--clients 1 8 32]
        [--requests N] [--smoke] [--json PATH]

Three sides, one run:
- `ner tag` offline: the same sentences (words joined by spaces, one a line) through the routine
  `ner tag` runs (`iter_tags`, batch 64), same checkpoint and backend, after a warm-up; in a
  child process of its own, before any server starts.
- ours: the real `ner serve CKPT --backend ... --quantize ...` process (default batching).
- the anchor a user would write by hand: a FastAPI endpoint calling
  `transformers.pipeline("token-classification")` per request, on an AutoModelForTokenClassification
  with the checkpoint's encoder weights (`benchmarks.predict.export_hf`), served by uvicorn.

For each number of concurrent clients (an httpx asyncio client, keep-alive connections, each
client sending its next request when the last is answered), a fixed count of requests after a
warm-up of 32: requests/s, p50/p99 latency, failed requests, and the server's CPU time a request
(its whole process tree, from psutil). Our answers are checked against the offline entities.
Both servers start after the offline run and idle while the other is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, headline, load_sentences, parse, parser, report

CLIENTS = (1, 8, 32)
WARMUP = 32
CLIENT_NOTES = {
    "stdlib": "one thread a client, each with a keep-alive http.client connection",
    "httpx": "httpx asyncio, keep-alive connections",
}
HEADERS = ["side", "clients", "requests", "failed", "requests/s", "p50 ms", "p99 ms",
           "vs ner tag", "vs anchor", "server CPU ms/request"]  # fmt: skip


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def offline_child(args: argparse.Namespace) -> dict:
    """In a fresh process: export the HF anchor model, then time `ner tag`'s routine."""
    from benchmarks.common import build_tagger
    from benchmarks.predict import export_hf
    from ner.corpus.text import entities_from_tags, words_and_offsets
    from ner.inference.routine import iter_tags
    from ner.serving.loader import load_model

    texts = json.loads(Path(args.texts).read_text(encoding="utf-8"))
    copied = export_hf(build_tagger(args.encoder, args.ckpt), Path(args.hf_dir))
    (Path(args.hf_dir) / "ready").touch()  # a smoke run starts the anchor now
    model = load_model(args.ckpt, args.backend, args.quantize, "cpu")
    prepared = [words_and_offsets(t) for t in texts]
    words = [p[0] for p in prepared]
    list(iter_tags(model, words[:64], batch_size=64))  # warm-up
    start = time.perf_counter()
    tagged = list(iter_tags(model, words, batch_size=64))
    seconds = time.perf_counter() - start
    entities = [
        [[e["label"], e["start"], e["end"]] for e in entities_from_tags(*t, p[1], p[2])]
        for p, t in zip(prepared, tagged, strict=True)
    ]
    return {"seconds": seconds, "sentences": len(texts), "entities": entities, "copied": copied}


def anchor_app(hf_dir: str):
    """The hand-written anchor: FastAPI + a token-classification pipeline called per request."""
    from fastapi import FastAPI
    from transformers import pipeline

    pipe = pipeline(
        "token-classification", model=hf_dir, aggregation_strategy="first", device="cpu"
    )
    app = FastAPI()

    @app.get("/health")
    def health() -> str:
        return "ok"

    @app.post("/predict")
    def predict(body: dict) -> dict:
        found = pipe(body["text"])
        return {"entities": [{**e, "score": float(e["score"])} for e in found]}

    return app


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    """A server process, its output to `log`."""
    with log.open("w") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def wait_ready(proc: subprocess.Popen, port: int, log: Path, timeout: float = 600) -> None:
    """Poll GET /health until it answers 200; a server that exits first is an error."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"server not ready after {timeout} s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it is still there after 30 s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and its descendants."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            times = p.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


async def drive_httpx(port: int, texts: list[str], clients: int, count: int) -> dict:
    """Send `count` requests (text i % len) from `clients` concurrent httpx asyncio clients."""
    import httpx

    url, latencies, answers, failed = f"http://127.0.0.1:{port}/predict", [], {}, 0
    next_index = iter(range(count))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal failed
        for i in next_index:
            sent = time.perf_counter()
            try:
                response = await http.post(url, json={"text": texts[i % len(texts)]})
                ok = response.status_code == 200
                answers[i] = response.json() if ok else None
            except (httpx.HTTPError, ValueError):
                ok = False
            latencies.append(time.perf_counter() - sent)
            failed += not ok

    async with httpx.AsyncClient(limits=limits, timeout=300) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "latencies": latencies, "failed": failed, "answers": answers}


def drive_stdlib(port: int, texts: list[str], clients: int, count: int) -> dict:
    """Send `count` requests (text i % len) from `clients` threads, each with its own keep-alive
    `http.client` connection."""
    import http.client
    import threading

    latencies, answers, failures = [], {}, []
    next_index, lock = iter(range(count)), threading.Lock()
    headers = {"Content-Type": "application/json"}

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                break
            body = json.dumps({"text": texts[i % len(texts)]}).encode("utf-8")
            sent = time.perf_counter()
            try:
                connection.request("POST", "/predict", body, headers)
                response = connection.getresponse()
                data = response.read()
                answers[i] = json.loads(data) if response.status == 200 else None
            except (OSError, http.client.HTTPException, ValueError):
                connection.close()  # reconnects on the next request
                answers[i] = None
            latencies.append(time.perf_counter() - sent)
            if answers[i] is None:
                failures.append(i)
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "latencies": latencies, "failed": len(failures), "answers": answers}


def drive(kind: str, port: int, texts: list[str], clients: int, count: int) -> dict:
    """The load of one level with the client `kind` (stdlib or httpx)."""
    if kind == "httpx":
        return asyncio.run(drive_httpx(port, texts, clients, count))
    return drive_stdlib(port, texts, clients, count)


def measure(
    side: str, port: int, pid: int, texts: list[str], clients: int, count: int, kind: str
) -> dict:
    """One load level against one server, after a warm-up."""
    drive(kind, port, texts, clients, min(WARMUP, count))
    cpu = tree_cpu(pid)
    run = drive(kind, port, texts, clients, count)
    cpu = tree_cpu(pid) - cpu
    ordered = sorted(run["latencies"])
    return {
        "side": side,
        "clients": clients,
        "requests": count,
        "failed": run["failed"],
        "seconds": run["seconds"],
        "rate": count / run["seconds"],
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "cpu_ms": 1000 * cpu / count,
        "answers": run["answers"],
    }


def mismatches(answers: dict, texts: list[str], offline: list) -> int:
    """Answers of ours whose entities (label, start, end) differ from the offline ones."""
    wrong = 0
    for i, answer in answers.items():
        if answer is not None:
            found = [[e["label"], e["start"], e["end"]] for e in answer["results"][0]["entities"]]
            wrong += found != offline[i % len(texts)]
    return wrong


def backend_options(args: argparse.Namespace) -> list[str]:
    """`--backend B [--quantize int8]`, as `ner tag` and `ner serve` take them."""
    return ["--backend", args.backend] + (["--quantize", args.quantize] if args.quantize else [])


def offline_result(proc: subprocess.Popen, log: Path) -> dict:
    """The `RESULT <json>` line of the finished offline child."""
    if proc.wait():
        raise RuntimeError(f"the offline run failed:\n{log.read_text()[-3000:]}")
    line = next(ln for ln in log.read_text().splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def launch(args: argparse.Namespace, tmp: Path) -> tuple[dict, dict[str, tuple]]:
    """The offline figures, and our server and the anchor's, (process, port, log) each, ready.
    The servers start once the offline run is over; in a smoke run (whose figures mean nothing)
    they start beside it, the anchor as soon as its model is written."""
    hf_dir, ports = tmp / "hf", {"ours": free_port(), "anchor": free_port()}
    commands = {
        "ours": [sys.executable, "-m", "ner.cli.main", "serve", args.ckpt,
                 "--port", str(ports["ours"]), *backend_options(args), *args.serve_args.split()],
        "anchor": [sys.executable, "-m", "benchmarks.serve", "--anchor-server", str(hf_dir),
                   "--port", str(ports["anchor"])],
    }  # fmt: skip
    offline_cmd = [sys.executable, "-m", "benchmarks.serve", "--offline-child", "--ckpt",
                   args.ckpt, "--texts", str(tmp / "texts.json"), "--hf-dir", str(hf_dir),
                   "--encoder", args.encoder, *backend_options(args)]  # fmt: skip
    offline = start(offline_cmd, tmp / "offline.log")
    started: dict[str, tuple] = {}

    def launch_one(side: str) -> None:
        log = tmp / f"{side}.log"
        started[side] = (start(commands[side], log), ports[side], log)

    try:
        if args.smoke:
            launch_one("ours")
            while not (hf_dir / "ready").exists() and offline.poll() is None:
                time.sleep(0.2)
            launch_one("anchor")
        result = offline_result(offline, tmp / "offline.log")
        for side in commands:
            if side not in started:
                launch_one(side)
        for proc, port, log in started.values():
            wait_ready(proc, port, log)
    except BaseException:
        for proc in [offline] + [s[0] for s in started.values()]:
            stop(proc)
        raise
    return result, started


def rows_of(offline: dict, results: list[dict], args: argparse.Namespace) -> list[list]:
    """The table: the offline rate first, then each side at each load."""
    offline_rate = offline["sentences"] / offline["seconds"]
    anchor = {r["clients"]: r["rate"] for r in results if r["side"] == "anchor"}
    backend = args.backend + (f" {args.quantize}" if args.quantize else "")
    rows = [[f"ner tag offline ({backend})", "-", offline["sentences"], 0, offline_rate, "-",
             "-", 1.0, offline_rate / anchor[max(anchor)], "-"]]  # fmt: skip
    for r in results:
        name = f"ner serve ({backend})" if r["side"] == "ours" else "FastAPI + HF pipeline"
        rows.append([name, r["clients"], r["requests"], r["failed"], r["rate"], r["p50_ms"],
                     r["p99_ms"], r["rate"] / offline_rate, r["rate"] / anchor[r["clients"]],
                     r["cpu_ms"]])  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.splitlines()[0], __file__)
    p.add_argument("--ckpt", help="the checkpoint to serve (required)")
    p.add_argument("--backend", choices=("torch", "onnx"), default="torch")
    p.add_argument("--quantize", choices=("int8",), default=None)
    p.add_argument("--clients", type=int, nargs="+", default=list(CLIENTS))
    p.add_argument("--requests", type=int, help="requests a load level (default: every sentence)")
    p.add_argument(
        "--client", choices=("stdlib", "httpx"), default="stdlib",
        help="the load generator: http.client threads, or httpx asyncio (heavier)",
    )  # fmt: skip
    p.add_argument("--serve-args", default="", help="more options of ner serve, one string")
    p.add_argument("--offline-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--anchor-server", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--texts", help=argparse.SUPPRESS)
    p.add_argument("--hf-dir", help=argparse.SUPPRESS)
    args = parse(p, argv)
    if args.anchor_server:
        import uvicorn

        uvicorn.run(anchor_app(args.anchor_server), host="127.0.0.1", port=args.port,
                    log_level="warning")  # fmt: skip
        return
    if args.offline_child:
        print("RESULT " + json.dumps(offline_child(args)), flush=True)
        return
    if not args.ckpt:
        p.error("--ckpt is required")
    texts = [" ".join(words) for words, _ in load_sentences("testb", 16 if args.smoke else None)]
    count = args.requests or len(texts)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        (tmp / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
        offline, started = launch(args, tmp)
        results = []
        try:
            for side, (proc, port, _) in started.items():
                for clients in args.clients:
                    row = measure(side, port, proc.pid, texts, clients, count, args.client)
                    results.append(row)
        finally:
            for proc, _, _ in started.values():
                stop(proc)
    wrong = sum(mismatches(r["answers"], texts, offline["entities"]) for r in results
                if r["side"] == "ours")  # fmt: skip
    load_after = os.getloadavg()
    notes = [
        f"{len(texts)} eng.testb sentences (words joined by spaces), one a request; {count}"
        f" requests a load level after {min(WARMUP, count)} warm-up ones; checkpoint {args.ckpt}",
        "ner tag offline: the routine of `ner tag` (iter_tags, batch 64) on all the sentences in"
        " one call, in its own process before the servers started",
        f"ner serve {' '.join(backend_options(args))} {args.serve_args}".rstrip()
        + " (batching: max 64 texts, what is queued, unless set); our answers whose entities"
        f" differ from the offline ones: {wrong}",
        "anchor: FastAPI sync endpoint calling pipeline('token-classification',"
        " aggregation_strategy='first') per request (uvicorn, one process); its classifier is "
        + ("the checkpoint's head" if offline["copied"] else "a fresh one (the head is not plain"
           " linear), so its entities are not comparable"),
        f"clients: {CLIENT_NOTES[args.client]}; the load generator shares the machine's CPUs",
        f"load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}",
    ]  # fmt: skip
    raw = [{k: v for k, v in r.items() if k != "answers"} for r in results]
    extra = {"raw": raw, "offline": {k: v for k, v in offline.items() if k != "entities"},
             "mismatches": wrong}  # fmt: skip
    report("serve: one-sentence requests over HTTP", HEADERS, rows_of(offline, results, args),
           notes, args, extra, top_of(results, args), variant_of(args))  # fmt: skip


def top_of(results: list[dict], args: argparse.Namespace) -> dict:
    """The headline: requests/s of `ner serve` and of the anchor at the most clients."""
    most = max(args.clients)
    rate = {r["side"]: r["rate"] for r in results if r["clients"] == most}
    ours = f"ner serve ({' '.join(x for x in (args.backend, args.quantize) if x)})"
    figure = f"eng.testb one sentence a request, {most} clients"
    return headline(figure, "requests/s", (ours, rate["ours"]),
                    ("FastAPI + HF pipeline", rate["anchor"]))  # fmt: skip


def variant_of(args: argparse.Namespace) -> str:
    """The record's name after `serve-`: the backend unless it is the default (torch)."""
    if (args.backend, args.quantize) == ("torch", None):
        return ""
    return "-".join(x for x in (args.backend, args.quantize) if x)


if __name__ == "__main__":
    main()
