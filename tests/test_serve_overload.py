"""`ner serve` under overload: past `--max-queue` a request is refused at once (503,
Retry-After, one line of JSON) while the accepted ones get their answers; past `--deadline` a
request gets a 504, not a hang; `/health` answers while the worker is busy; the soak benchmark in
smoke mode. (The drain on SIGTERM is checked on the real command, in test_serve.)

The in-process apps (`serving.InProcess`) tag with a model that sleeps before each batch
(`Slow`): a worker busy for a known time, so what is refused, late or in flight is known.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from functools import partial

import httpx
import pytest
from helpers import TAG_LINES
from serving import InProcess, info_of, running

from ner.model.tagger import load_tagger
from ner.serving.admission import Admission, Policy, late_message
from ner.serving.loader import load_model
from ner.serving.server import build_server

WORDS = [line for line in TAG_LINES if line.strip()]  # each one batch of the routine


class Slow:
    """A tagger that sleeps `seconds` before each batch."""

    def __init__(self, model, seconds: float):
        self.model, self.seconds = model, seconds

    def __getattr__(self, name):
        return getattr(self.model, name)

    def __call__(self, batch):
        time.sleep(self.seconds)
        return self.model(batch)


def slow_model(ckpt: str, seconds: float) -> Slow:
    """The loader of the in-process apps (module level: it pickles into the worker)."""
    return Slow(load_model(ckpt, "torch", None, "cpu"), seconds)


def timed_posts(app: InProcess, bodies: list[dict]) -> list[tuple[httpx.Response, float]]:
    """Send every body at once; each response with the seconds it took."""

    async def one(body):
        sent = time.monotonic()
        response = await app.client.post("/predict", json=body)
        return response, time.monotonic() - sent

    async def every():
        return await asyncio.gather(*(one(body) for body in bodies))

    return app.run(every())


def spans(entities: list[dict]) -> list[tuple]:
    return [(e["label"], e["start"], e["end"]) for e in entities]


@pytest.fixture(scope="module")
def ckpt(trained) -> str:
    return str(trained["ckpt"] / "best.ckpt")


@pytest.fixture(scope="module")
def busy(ckpt):
    """At most 4 texts held, one text a batch, one second a batch (1 text/s for Retry-After)."""
    policy = Policy(max_queue=4, deadline=60, rate=1.0)
    server = build_server(partial(slow_model, ckpt, 1.0), info_of(ckpt), max_batch_size=1,
                          threads=1, policy=policy)  # fmt: skip
    with running(server) as client:
        yield client


def test_past_the_bound_requests_get_503_at_once_and_the_accepted_ones_their_answers(busy, ckpt):
    texts = [WORDS[i % len(WORDS)] for i in range(12)]
    expected = dict(zip(texts, load_tagger(ckpt).predict(texts), strict=True))
    answers = list(zip(texts, timed_posts(busy, [{"text": t} for t in texts]), strict=True))
    accepted = [(t, r, s) for t, (r, s) in answers if r.status_code == 200]
    refused = [(t, r, s) for t, (r, s) in answers if r.status_code == 503]
    assert (len(accepted), len(refused)) == (4, 8), [r.status_code for _, (r, _) in answers]
    # every refusal came before the first batch (one second) was answered
    assert max(s for _, _, s in refused) < min(s for _, _, s in accepted)
    for _, response, _ in refused:
        assert response.headers["retry-after"] == "4"  # 4 texts held, at 1 text/s
        assert list(response.json()) == ["error"] and "\n" not in response.text
        assert re.fullmatch(
            r"server busy: 4 texts queued and this request's 1 would pass --max-queue 4;"
            r" retry after 4 s", response.json()["error"],
        )  # fmt: skip
    for text, response, _ in accepted:
        assert spans(response.json()["results"][0]["entities"]) == spans(expected[text])
    assert busy.get("/info").json()["queue"] == {"held_texts": 0, "stopping": False}
    assert busy.post(json={"text": WORDS[0]}).status_code == 200  # it serves on


def test_info_tells_the_bound_and_the_deadline(busy):
    info = busy.get("/info").json()
    assert info["model"]["admission"] == {"max_queue": 4, "deadline": 60, "drain_timeout": 65,
                                          "rate": 1.0, "scope": "all HTTP processes"}  # fmt: skip
    assert info["server"]["timeout"] == 60  # the worker drops what waited longer


def test_health_answers_at_once_while_the_worker_tags(busy):
    pending = [
        asyncio.run_coroutine_threadsafe(busy.client.post("/predict", json={"text": t}), busy.loop)
        for t in WORDS[:2]
    ]  # two seconds of work
    deadline = time.monotonic() + 30
    while busy.get("/info").json()["queue"]["held_texts"] < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    for _ in range(5):
        health = busy.get("/health")
        assert (health.status_code, health.text) == (200, "ok")
    # answered while the worker still tags: the order of events, not a timing
    assert not all(p.done() for p in pending)
    assert all(p.result(60).status_code == 200 for p in pending)


def test_a_request_past_the_deadline_gets_a_504_not_a_hang(ckpt):
    # 0.8 s a batch, a 2 s deadline: of 5 requests at once the first two are answered, the
    # third is tagged past the deadline, the last two waited past it before a worker took them
    server = build_server(partial(slow_model, ckpt, 0.8), info_of(ckpt), max_batch_size=1,
                          threads=1, policy=Policy(deadline=2.0))  # fmt: skip
    with running(server) as app:
        answers = timed_posts(app, [{"text": WORDS[0]}] * 5)
        late = [(r, s) for r, s in answers if r.status_code == 504]
        assert {r.status_code for r, _ in answers} <= {200, 504} and len(late) >= 3
        for response, seconds in late:
            assert response.json() == {"error": late_message(2.0)}
            assert seconds >= 2.0  # not before the deadline
        # the worker dropped the ones that waited too long: nothing is held, a new one is tagged
        assert app.get("/info").json()["queue"]["held_texts"] == 0
        fresh, _ = timed_posts(app, [{"text": WORDS[1]}])[0]
        assert fresh.status_code == 200
        assert app.get("/info").json()["queue"]["held_texts"] == 0
        # once stopping (SIGTERM), a new request is refused at once
        app.server.admission.stop()
        stopped = app.post(json={"text": WORDS[0]})
        assert stopped.status_code == 503 and stopped.headers["retry-after"] == "7"
        assert stopped.json() == {"error": "server stopping: it takes no new requests"}


def test_admission_counts_texts_and_takes_a_large_request_alone():
    admission = Admission(Policy(max_queue=10, rate=5.0))
    admission.admit(30)  # over the bound, but nothing else is held
    with pytest.raises(Exception) as refused:
        admission.admit(1)
    assert (refused.value.status, refused.value.retry_after) == (503, 6)  # 30 texts at 5/s
    admission.release(30)
    admission.admit(6)
    admission.admit(4)
    assert admission.held == 10


@pytest.mark.integration
def test_soak_smoke(ckpt, conll_dir, capsys, tmp_path):
    from benchmarks import soak

    out = tmp_path / "soak.json"
    # one text held at most: of the 4 clients' first requests, sent at once, 3 are refused
    soak.main(["--smoke", "--ckpt", ckpt, "--clients", "4", "--out", str(out),
               "--serve-args=--workers 1 --max-queue 1"])  # fmt: skip
    data = json.loads(out.read_text(encoding="utf-8"))
    totals = data["totals"]
    assert totals["answered"] > 0 and totals["failed"] == 0, data["failures"]
    assert totals["refused"] > 0 and totals["refused_improper"] == 0  # 503 + Retry-After + JSON
    assert len(data["rss_samples"]) >= 4 and all(s["total_mib"] > 0 for s in data["rss_samples"])
    assert data["rss"]["growth_pct"] is not None
    assert (data["stop"]["exit_code"], data["stop"]["left"]) == (0, [])
    assert data["machine"]["cores"] and data["packages"]["litserve"] and data["versions"]["ner"]
    assert data["command"].startswith("ner bench soak --smoke")
    assert "soak" in capsys.readouterr().out
