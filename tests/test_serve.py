"""`ner serve`: the API in-process (httpx's ASGITransport, as LitServe's own tests do, with a real
inference worker), the pooling rule, the real command on a loopback port, and the benchmark.

The server must answer what `ner tag` writes for the same lines, through the same routine; bad
requests get a one-line JSON 4xx and the server keeps serving; SIGTERM answers the requests in
flight, refuses new ones and leaves no process behind. (Overload: test_serve_overload.)
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import httpx
import psutil
import pytest
from helpers import ROOT, TAG_LINES, one_line_error, run_ner
from litserve.utils import LitAPIStatus
from seqeval.metrics.sequence_labeling import get_entities
from serving import served

from ner.cli.serve import processes
from ner.model.tagger import load_tagger
from ner.serving import batcher
from ner.serving.admission import late_message
from ner.serving.api import Limits, parse_request
from ner.serving.batcher import PoolingLoop
from ner.serving.server import UI
from ner.utils.precision import auto_precision

BF16 = auto_precision("cpu") == "bf16-mixed"  # inference autocasts to bf16 here
EMOJI = "😀 john smith visited paris today ."
# longer than the tiny model's 64-piece window: tagged in several windows, as by `ner tag`
LONG = " ".join(["john smith visited paris and berlin with mary ."] * 12)
LINES = [*TAG_LINES, EMOJI, LONG, "Zürich – naïve café in Genève , 東京 .", "\tjohn\u00a0smith ."]


@pytest.fixture(scope="module")
def ckpt(trained) -> str:
    return str(trained["ckpt"] / "best.ckpt")


@pytest.fixture(scope="module")
def app(ckpt):
    """The app with the default limits and one real inference worker (one thread, as the tests'
    own tagging runs, so both compute the same floats)."""
    with served(ckpt) as client:
        yield client


def test_health_and_info(app, ckpt):
    health = app.get("/health")
    assert (health.status_code, health.text) == (200, "ok")
    model = app.get("/info").json()["model"]
    tagger = load_tagger(ckpt)
    assert model["labels"] == tagger.labels
    assert model["types"] == ["LOC", "ORG", "PER"]
    assert model["window_settings"] == tagger.window_settings.as_dict()
    assert model["combiner"]["class_path"] == "ner.modules.combiners.LastLayer"
    assert (model["backend"], model["quantize"], model["device"]) == ("torch", None, "cpu")
    assert model["version"] == __import__("importlib.metadata").metadata.version("ner")
    assert model["offset_unit"] == "unicode_code_point"
    # the card `ner fit` wrote beside the checkpoint, linked
    assert model["model_card"] == str((Path(ckpt).parent / "README.md").resolve())
    assert model["limits"] == {
        "max_chars": 1_000_000,
        "max_texts": 1000,
        "max_body_bytes": 6_065_536,
    }
    assert model["batching"] == {"max_batch_size": 64, "batch_timeout": 0.0, "max_pieces": None}
    assert (model["workers"], model["threads"]) == (1, 1)
    assert model["admission"] == {"max_queue": None, "deadline": 30.0, "drain_timeout": 35.0,
                                  "rate": None, "scope": "all HTTP processes"}  # fmt: skip
    assert app.get("/info").json()["queue"] == {"held_texts": 0, "stopping": False}


def test_predict_answers_what_ner_tag_writes(app, ckpt, tmp_path, capsys):
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    code, out, err = run_ner(["tag", ckpt, str(source)], capsys)
    assert code == 0, err
    expected = [
        {"text": r["text"], "entities": r["entities"]}
        for r in map(json.loads, out.split("\n")[:-1])
    ]
    response = app.post(json={"texts": LINES})
    assert response.status_code == 200
    answer = response.json()
    assert answer["offset_unit"] == "unicode_code_point"
    assert answer["results"] == expected  # byte for byte after parsing: scores too
    assert sum(len(r["entities"]) for r in expected) > 10  # the set is not trivially empty
    assert any(e["end"] > 400 for e in answer["results"][LINES.index(LONG)]["entities"])


def test_pre_split_words_answer_as_their_joined_text(app):
    tokens = [line.split() for line in LINES]
    joined = app.post(json={"texts": [" ".join(words) for words in tokens]}).json()
    assert app.post(json={"tokens": tokens}).json() == joined


def test_concurrent_requests_are_answered_as_one_request(app):
    together = app.post(json={"texts": LINES}).json()["results"]
    alone = [r.json()["results"][0] for r in app.post_many([{"text": t} for t in LINES])]
    for one, many in zip(alone, together, strict=True):
        assert [(e["label"], e["start"], e["end"]) for e in one["entities"]] == [
            (e["label"], e["start"], e["end"]) for e in many["entities"]
        ]
        # other batch mates pad the batch to another length, and kernels (AVX2, AVX-512, AMX)
        # may then block a reduction differently: a last-bit change in fp32, far under 1e-5 of a
        # score; where inference autocasts to bf16 (8-bit mantissa, 2**-8 relative) such a change
        # can round an activation one bf16 step the other way, so 1e-2 there
        for e, f in zip(one["entities"], many["entities"], strict=True):
            assert e["score"] == pytest.approx(f["score"], rel=1e-2 if BF16 else 1e-5)


def test_word_tags_and_code_point_offsets(app):
    result = app.post(json={"text": EMOJI, "word_tags": True}).json()["results"][0]
    words = result["words"]
    assert [w["text"] for w in words] == EMOJI.split()
    assert all(EMOJI[w["start"] : w["end"]] == w["text"] for w in words)
    # the entities are the words' IOB2 tags chunked, at the words' code-point offsets
    chunks = get_entities([w["tag"] for w in words])
    assert [(e["label"], e["start"], e["end"]) for e in result["entities"]] == [
        (label, words[a]["start"], words[b]["end"]) for label, a, b in chunks
    ]
    assert result["entities"] and all(
        EMOJI[e["start"] : e["end"]] == e["text"] for e in result["entities"]
    )
    assert "words" not in app.post(json={"text": EMOJI}).json()["results"][0]


def test_a_long_passage_up_to_100k_characters(app, ckpt):
    text = ("john smith visited paris , said reuters . " * 2400)[:100_000]
    response = app.post(json={"text": text})
    assert response.status_code == 200
    tagger = load_tagger(ckpt)
    assert response.json()["results"][0]["entities"] == tagger.predict([text])[0]


BAD = [
    ("not JSON", {"content": b"{text: 1}"}, 400),
    ("empty body", {"content": b""}, 400),
    ("invalid UTF-8", {"content": b'{"text": "caf\xe9"}'}, 400),
    ("nested too deeply", {"content": b"[" * 100_000}, 400),
    ("not an object", {"json": ["a", "b"]}, 422),
    ("text not a string", {"json": {"text": 5}}, 422),
    ("texts not a list", {"json": {"texts": "a b"}}, 422),
    ("texts not strings", {"json": {"texts": ["a", None]}}, 422),
    ("tokens not word lists", {"json": {"tokens": ["a b"]}}, 422),
    ("a token with a space", {"json": {"tokens": [["a b"]]}}, 422),
    ("unknown field", {"json": {"txt": "a"}}, 422),
    ("two inputs", {"json": {"text": "a", "texts": ["a"]}}, 422),
    ("no input", {"json": {"word_tags": True}}, 422),
    ("word_tags not a boolean", {"json": {"text": "a", "word_tags": "yes"}}, 422),
    ("a NUL", {"json": {"text": "john\x00smith"}}, 422),
    ("a control character", {"json": {"texts": ["ok", "esc \x1b[31m"]}}, 422),
    ("an unpaired surrogate", {"content": b'{"text": "a \\ud800 b"}'}, 422),
    ("a 10 MB body", {"content": b'{"text": "' + b"a" * 10_000_000 + b'"}'}, 413),
    ("10,000 texts", {"json": {"texts": ["john"] * 10_000}}, 413),
    ("over the character cap", {"json": {"text": "paris " * 200_000}}, 413),
]


def test_bad_requests_get_a_one_line_4xx_and_the_server_keeps_serving(app):
    for name, kwargs, status in BAD:
        response = app.post(**kwargs)
        assert response.status_code == status, (name, response.text)
        body = response.json()
        assert list(body) == ["error"] and body["error"], name
        assert "\n" not in body["error"] and len(body["error"]) < 300, name
    wrong_method = app.get("/predict")
    assert (wrong_method.status_code, wrong_method.json()) == (405, {"error": "Method Not Allowed"})
    good = app.post(json={"text": "john smith visited paris ."})
    assert good.status_code == 200 and good.json()["results"][0]["entities"]


def test_error_messages_name_the_field():
    limits = Limits(max_chars=10, max_texts=2)
    cases = {
        b'{"texts": ["a", 3]}': "texts[1]: must be a string, not a number",
        b'{"tokens": [["a"], ["b", ""]]}': "tokens[1][1]: a word must be non-empty",
        b'{"texts": ["a", "b", "c"]}': "texts: 3 texts, over the cap of 2 a request",
        b'{"text": "a\\u0007"}': "text: control character U+0007 at offset 1",
        b'{"tokens": [["abcde", "fghij"]]}': "tokens: 11 characters, over the cap of 10",
    }
    for body, message in cases.items():
        with pytest.raises(Exception) as caught:
            parse_request(body, limits)
        assert caught.value.message.startswith(message), caught.value.message
    # whitespace controls are text; an empty list is no work, not an error
    assert parse_request(b'{"text": "a\\tb\\nc\\r\\fd"}', limits)["items"] == ["a\tb\nc\r\fd"]
    assert parse_request(b'{"texts": []}', limits) == {"items": [], "word_tags": False}


def test_the_page_ships_in_the_package_and_loads_nothing_from_outside(app):
    assert app.get("/").headers["location"] == "/ui/"
    page = app.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for name in ("index.html", "app.js", "style.css"):
        served = app.get(f"/ui/{name}")
        assert served.status_code == 200
        assert served.text == (UI / name).read_text(encoding="utf-8")
        assert "http://" not in served.text and "https://" not in served.text, name
    assert (UI / "index.html").is_relative_to(ROOT / "ner")


@pytest.mark.parametrize(
    ("given", "device", "cpus", "expected"),
    [
        ((None, None), "cpu", 2, (2, 1)),  # a worker a core, one thread each
        ((None, None), "cpu", 16, (4, 4)),  # at most 4 workers, sharing the cores
        ((3, None), "cpu", 2, (3, 1)),
        ((None, 2), "cpu", 8, (4, 2)),
        ((None, None), "cuda", 8, (1, None)),  # one GPU worker, torch's own threads
    ],
)
def test_workers_and_threads_by_default(monkeypatch, given, device, cpus, expected):
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    args = argparse.Namespace(workers=given[0], threads=given[1])
    assert processes(args, device) == expected


def fake_api(max_batch_size: int, batch_timeout: float, request_timeout=False):
    return SimpleNamespace(
        max_batch_size=max_batch_size, batch_timeout=batch_timeout, request_timeout=request_timeout
    )


def request(uid: str, texts: int, age: float = 0.0) -> tuple:
    return (0, uid, time.monotonic() - age, {"items": ["john ."] * texts, "word_tags": False})


def test_pooling_takes_what_is_queued_up_to_the_text_budget():
    loop, waiting = PoolingLoop(), queue.Queue()
    for uid, texts in (("a", 40), ("b", 30), ("c", 10)):
        waiting.put(request(uid, texts, age=10))  # past any deadline: nothing is waited for
    batch, late = loop.get_batch_requests(fake_api(64, 0.005), waiting, None)
    assert [uid for _, uid, _ in batch] == ["a", "b"] and late == []  # 70 texts >= 64: closed
    batch, _ = loop.get_batch_requests(fake_api(64, 0.005), waiting, None)
    assert [uid for _, uid, _ in batch] == ["c"]


class GoneQueue:
    """A queue whose manager process has ended (as when the server stops)."""

    def get(self, timeout=None):
        raise EOFError

    get_nowait = get


def test_a_worker_waiting_when_the_server_stops_ends_quietly():
    with pytest.raises(SystemExit) as ended:  # was an EOFError traceback on every SIGTERM
        PoolingLoop()._next(GoneQueue(), 1.0)
    assert ended.value.code == 0


def test_pooling_waits_for_a_late_request_until_the_first_ones_deadline():
    loop, waiting = PoolingLoop(), queue.Queue()
    waiting.put(request("first", 1))
    threading.Timer(0.05, lambda: waiting.put(request("second", 1))).start()
    # a long timeout, closed early by the budget of 2 texts when the second arrives
    batch, _ = loop.get_batch_requests(fake_api(2, 30.0), waiting, None)
    assert [uid for _, uid, _ in batch] == ["first", "second"]


class Transport:
    """What a worker sends back to the HTTP processes."""

    def __init__(self):
        self.sent = []

    def send(self, item, consumer_id):
        self.sent.append((consumer_id, item))


def test_pooling_answers_requests_that_waited_past_the_deadline_itself():
    loop, waiting, transport = PoolingLoop(), queue.Queue(), Transport()
    waiting.put(request("old", 1, age=100))
    waiting.put(request("new", 1))
    batch, late = loop.get_batch_requests(fake_api(64, 0.0, request_timeout=30), waiting, transport)
    assert [uid for _, uid, _ in batch] == ["new"] and late == []
    # the message the HTTP process gives when it stops waiting, not LitServe's own
    [(consumer, (uid, (answer, status, *_)))] = transport.sent
    assert (consumer, uid, status) == (0, "old", LitAPIStatus.OK)
    assert answer == {"error": late_message(30), "status": 504}


def test_a_worker_hands_freed_memory_back_at_most_every_few_seconds(monkeypatch):
    calls = []
    monkeypatch.setattr(batcher, "MALLOC_TRIM", calls.append)
    loop, waiting = PoolingLoop(), queue.Queue()
    for uid in "abc":
        waiting.put(request(uid, 1))
        loop.get_batch_requests(fake_api(64, 0.0), waiting, None)
        # nothing tagged before "a"; after it, once; not again within TRIM_SECONDS
        assert calls == ([] if uid == "a" else [0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workers_of(pid: int) -> set[int]:
    """The inference workers (spawned interpreters) under process `pid`."""
    found = set()
    for child in psutil.Process(pid).children(recursive=True):
        try:  # a worker just killed is a zombie (no command line) until its parent reaps it
            if "spawn_main" in " ".join(child.cmdline()):
                found.add(child.pid)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            pass
    return found


def alive(pids: list[int]) -> list[int]:
    """The processes of `pids` still running (a zombie has ended; one may vanish meanwhile)."""
    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


REQUESTS, TEXTS = 6, 100  # of LONG: seconds of tagging for the tiny model


def post_long(url: str) -> tuple[httpx.Response, float]:
    """A request of `TEXTS` long passages; its answer and when it came."""
    response = httpx.post(url, json={"texts": [LONG] * TEXTS}, timeout=180)
    return response, time.monotonic()


def refused(url: str) -> str:
    """Send new requests until one is refused (503, or the connection); what refused it. Until
    the server has taken the signal, a request may still be accepted (and answered)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            response = httpx.post(url, json={"text": EMOJI}, timeout=30)
        except httpx.ConnectError:
            return "connection refused"
        if response.status_code == 503:
            assert response.json() == {"error": "server stopping: it takes no new requests"}
            return "503"
        assert response.status_code == 200
        time.sleep(0.05)
    raise AssertionError("no new request was refused after SIGTERM")


def drain(proc: subprocess.Popen, url: str) -> dict:
    """SIGTERM once `REQUESTS` requests are all accepted (held, or answered): their answers, when
    the signal went, what refused a request sent after it, and whether the server still ran."""
    with ThreadPoolExecutor(REQUESTS) as pool:
        pending = [pool.submit(post_long, f"{url}/predict") for _ in range(REQUESTS)]
        held, deadline = 0, time.monotonic() + 120
        while held + TEXTS * sum(p.done() for p in pending) < REQUESTS * TEXTS:
            assert time.monotonic() < deadline, "the requests were not all accepted"
            time.sleep(0.02)
            held = httpx.get(f"{url}/info", timeout=30).json()["queue"]["held_texts"]
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        refusal = refused(f"{url}/predict")
        running = proc.poll() is None
        return {"answers": [p.result(180) for p in pending], "signalled": signalled,
                "refusal": refusal, "running": running}  # fmt: skip


def test_the_command_serves_on_loopback_and_drains_on_sigterm(ckpt, tmp_path):
    port = free_port()
    command = [sys.executable, "-m", "ner.cli.main", "serve", ckpt, "--port", str(port),
               "--workers", "2", "--max-queue", "100000", "--deadline", "120"]  # fmt: skip
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    run_dir = tmp_path / "cwd"
    run_dir.mkdir()
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(command, stdout=stdout, stderr=stderr, cwd=run_dir)
    url = f"http://127.0.0.1:{port}/predict"
    try:
        deadline = time.monotonic() + 150
        while "ready on" not in err.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.2)
        answer = httpx.post(url, json={"text": EMOJI}, timeout=60)
        listening = {
            c.laddr.ip
            for c in psutil.net_connections("tcp")
            if c.laddr and c.laddr.port == port and c.status == "LISTEN"
        }
        # a worker killed (as for memory) is replaced, and the other one serves meanwhile
        first = workers_of(proc.pid)
        os.kill(min(first), signal.SIGKILL)
        while len(workers_of(proc.pid) - {min(first)}) < 2:
            assert time.monotonic() < deadline + 30, "no worker replaced the killed one"
            time.sleep(0.2)
        after_kill = httpx.post(url, json={"text": EMOJI}, timeout=60)
        tree = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        drained = drain(proc, url.removesuffix("/predict"))
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(90)
    tagger = load_tagger(ckpt)
    expected = [e["text"] for e in tagger.predict([EMOJI])[0]]
    for response in (answer, after_kill):
        assert response.status_code == 200
        assert [e["text"] for e in response.json()["results"][0]["entities"]] == expected
    # SIGTERM: every accepted request answered, some after the signal (they were in flight),
    # a new one refused while the server still drained
    long = [e["text"] for e in tagger.predict([LONG])[0]]
    for response, _ in drained["answers"]:
        assert response.status_code == 200
        assert [[e["text"] for e in r["entities"]] for r in response.json()["results"]] == [
            long
        ] * TEXTS
    assert any(done > drained["signalled"] for _, done in drained["answers"])
    assert drained["refusal"] in ("503", "connection refused") and drained["running"]
    assert listening == {"127.0.0.1"}  # loopback only, by default
    assert len(first) == 2 and len(tree) >= 5  # + LitServe's manager, the HTTP server
    assert code == 0, err.read_text()
    time.sleep(0.5)  # reaped children vanish at once; one left behind would stay
    assert alive(tree) == []
    assert out.read_text() == ""  # logs on stderr only
    assert "Traceback" not in err.read_text() and "stopped" in err.read_text()
    assert list(run_dir.iterdir()) == []  # nothing written into the working directory


def test_command_errors_are_one_line(ckpt, tmp_path, capsys):
    port = str(free_port())
    missing = str(tmp_path / "nope.ckpt")
    assert missing in one_line_error(*run_ner(["serve", missing, "--port", port], capsys)[:3:2])
    bad = (("--port", "80"), ("--max-chars", "0"), ("--batch-timeout", "-1"),
           ("--max-queue", "0"), ("--deadline", "0"), ("--drain-timeout", "-1"),
           ("--batch-timeout", "40"))  # fmt: skip
    for option, value in bad:
        line = one_line_error(*run_ner(["serve", ckpt, option, value], capsys)[:3:2])
        assert option in line
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = str(taken.getsockname()[1])
        line = one_line_error(*run_ner(["serve", ckpt, "--port", busy], capsys)[:3:2])
    assert f"cannot listen on 127.0.0.1:{busy}" in line


@pytest.mark.integration
def test_benchmark_smoke(ckpt, conll_dir, capsys, tmp_path):
    from benchmarks import serve as bench
    from benchmarks.common import parse_table

    out = tmp_path / "serve.json"
    bench.main(["--smoke", "--ckpt", ckpt, "--clients", "1", "4", "--json", str(out)])
    headers, rows = parse_table(capsys.readouterr().out)
    assert headers == bench.HEADERS
    assert [r[:2] for r in rows] == [
        ["ner tag offline (torch)", "-"],
        ["ner serve (torch)", "1"],
        ["ner serve (torch)", "4"],
        ["FastAPI + HF pipeline", "1"],
        ["FastAPI + HF pipeline", "4"],
    ]
    data = json.loads(out.read_text(encoding="utf-8"))
    ours = [r for r in data["raw"] if r["side"] == "ours"]
    assert [(r["requests"], r["failed"]) for r in ours] == [(16, 0), (16, 0)]
    assert data["mismatches"] == 0  # every answer has the offline entities
    assert data["offline"]["sentences"] == 16
    assert all(r["rate"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0 for r in data["raw"])


def test_idle_connections_outlast_the_clients_pools():
    # a server that closes idle keep-alive connections no later than its clients' pools do
    # races them: a request sent as the server closes is a read error (seen in a soak run)
    import httpx

    from ner.serving.server import KEEP_ALIVE

    assert KEEP_ALIVE > httpx.Limits().keepalive_expiry
