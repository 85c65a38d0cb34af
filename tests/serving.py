"""What the server tests share: `ner serve`'s app in-process (httpx's ASGITransport, as LitServe's
own tests do, with a real inference worker), the `/info` of a checkpoint, and the app of a
checkpoint, ready, as a context manager."""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import httpx
from litserve.utils import wrap_litserve_start

from ner.cli.serve import describe
from ner.model.tagger import load_tagger
from ner.serving.loader import load_model
from ner.serving.server import build_server


class InProcess:
    """An httpx client on the app, in an event loop of its own (a thread) that keeps the app's
    lifespan open: LitServe's response reader lives in that loop for the whole module."""

    def __init__(self, server):
        self.server = server
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.run(self._open())

    async def _open(self) -> None:
        app = self.server.app
        self.lifespan = app.router.lifespan_context(app)
        await self.lifespan.__aenter__()
        transport = httpx.ASGITransport(app=app)
        self.client = httpx.AsyncClient(transport=transport, base_url="http://serve.test")

    async def _close(self) -> None:
        await self.client.aclose()
        await self.lifespan.__aexit__(None, None, None)

    def run(self, coroutine, timeout: float = 120):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def get(self, path: str) -> httpx.Response:
        return self.run(self.client.get(path))

    def post(self, **kwargs) -> httpx.Response:
        return self.run(self.client.post("/predict", **kwargs))

    def post_many(self, bodies: list[dict]) -> list[httpx.Response]:
        """Send every body at once (concurrent requests)."""

        async def send():
            return await asyncio.gather(*(self.client.post("/predict", json=b) for b in bodies))

        return self.run(send())

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.get("/health").status_code != 200:
            assert time.monotonic() < deadline, "the worker did not get ready"
            time.sleep(0.2)

    def close(self) -> None:
        self.run(self._close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


def info_of(ckpt: str) -> dict:
    args = argparse.Namespace(checkpoint=ckpt, backend="torch", quantize=None)
    return describe(load_tagger(ckpt), args)


@contextmanager
def running(server) -> Iterator[InProcess]:
    """A built server's app in-process, once its worker is ready; closed after."""
    with wrap_litserve_start(server) as started:
        client = InProcess(started)
        try:
            client.wait_ready()
            yield client
        finally:
            client.close()


@contextmanager
def served(ckpt, **kwargs) -> Iterator[InProcess]:
    """The app of checkpoint `ckpt` with one inference worker of one thread (as the tests' own
    tagging runs, so both compute the same floats); `kwargs` go to `build_server`."""
    loader = partial(load_model, str(ckpt), "torch", None, "cpu")
    with running(build_server(loader, info_of(str(ckpt)), threads=1, **kwargs)) as client:
        yield client
