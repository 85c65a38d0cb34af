"""`ner serve`'s HTTP side on LitServe: the app, its routes, and a run that stops cleanly.

Routes: `POST /predict` (validated here, in the HTTP process, then queued to the inference
worker, `ner.serving.batcher`), `GET /health` and `GET /info` (LitServe's: ready only once every
worker has loaded the model; the model's description, limits and batching), `GET /ui/` (the page,
static files shipped in the package). Every error is a one-line JSON `{"error": "..."}`.

`serve` runs the server until SIGINT or SIGTERM and leaves no process behind: LitServe handles
Ctrl-C (KeyboardInterrupt) but not SIGTERM, which would kill the main process and orphan its
workers, so SIGTERM takes the same path; whatever child is left after LitServe's shutdown is
terminated. Logs go to stderr (LitServe's default stream is stdout), access logs are off.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any
from unittest import mock

import litserve as ls
import litserve.server
import uvicorn.config
from fastapi import Request, Response
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from litserve.server import RegularRequestHandler
from litserve.utils import configure_logging
from starlette.exceptions import HTTPException

from ner.inference.routine import Tagger
from ner.serving.api import Limits, RequestError, parse_request
from ner.serving.batcher import TaggingAPI
from ner.utils.errors import NERError

UI = Path(__file__).resolve().parent / "ui"
HOSTS = ("127.0.0.1", "0.0.0.0", "::")  # what LitServe binds
SHUTDOWN_SECONDS = 5  # how long an HTTP process may finish its requests when stopped


def error(status: int, message: str) -> JSONResponse:
    """The one shape of every error answer."""
    return JSONResponse({"error": message}, status_code=status)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) as soon as it passes `limit` bytes, unread if its
    Content-Length says so."""
    declared = request.headers.get("content-length", "")
    over = RequestError(413, f"request body: over the cap of {limit:,} bytes")
    if declared.isdigit() and int(declared) > limit:
        raise over
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise over
        chunks.append(chunk)
    return b"".join(chunks)


def predict_endpoint(server: ls.LitServer, api: TaggingAPI, limits: Limits) -> Callable:
    """`POST /predict`: validate, queue to the workers through LitServe, answer JSON."""
    handler = RegularRequestHandler(api, server)

    async def predict(request: Request) -> Response:
        try:
            work = parse_request(await read_body(request, limits.max_body), limits)
        except RequestError as exc:
            return error(exc.status, exc.message)
        # a plain dict is passed on as it is (LitServe reads a `Request` itself)
        answer = await handler.handle_request(work, dict)
        if "error" in answer:  # this request alone could not be tagged (`batcher.failure`)
            return error(answer["status"], answer["error"])
        body = json.dumps(answer, ensure_ascii=False).encode("utf-8")
        return Response(body, media_type="application/json")

    return predict


def install_routes(server: ls.LitServer, api: TaggingAPI, limits: Limits) -> None:
    """Replace LitServe's `/predict` with the validating one and its `/` with a way to the page;
    add the page and JSON errors."""
    app = server.app
    replaced = (api.api_path, "/")
    app.router.routes = [r for r in app.router.routes if getattr(r, "path", None) not in replaced]
    app.add_api_route(api.api_path, predict_endpoint(server, api, limits), methods=["POST"])
    app.add_api_route(
        "/", lambda: RedirectResponse("/ui/"), methods=["GET"], include_in_schema=False
    )
    app.mount("/ui", StaticFiles(directory=UI, html=True), name="ui")

    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return error(exc.status_code, str(exc.detail))

    app.add_exception_handler(HTTPException, http_error)


def build_server(
    loader: Callable[[], Tagger],
    info: dict[str, Any],
    limits: Limits | None = None,
    max_batch_size: int = 64,
    batch_timeout: float = 0.005,
    workers: int = 1,
    threads: int | None = None,
    max_pieces: int | None = None,
) -> ls.LitServer:
    """A LitServer tagging with the model `loader` returns (in each of `workers` processes);
    `info` (JSON) describes it at `/info`, beside the limits and the batching."""
    limits = limits or Limits()
    api = TaggingAPI(loader, max_batch_size, batch_timeout, threads, max_pieces)
    batching = {"max_batch_size": max_batch_size, "batch_timeout": batch_timeout,
                "max_pieces": max_pieces}  # fmt: skip
    metadata = {**info, "limits": limits.as_dict(), "batching": batching, "workers": workers,
                "threads": threads}  # fmt: skip
    # timeout=False: a request queued behind a long one waits for it rather than failing;
    # restart_workers: a worker that dies (killed for memory) is replaced, its requests get a 500
    server = ls.LitServer(
        api, accelerator="cpu", workers_per_device=workers, timeout=False,
        model_metadata=metadata, restart_workers=True,
    )  # fmt: skip
    server.uvicorn_graceful_timeout = SHUTDOWN_SECONDS
    install_routes(server, api, limits)
    return server


def announce(server: ls.LitServer, message: str) -> None:
    """Print `message` on stderr once an HTTP process has started (it then takes requests)."""
    original = server.app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: Any):
        async with original(app):
            print(message, file=sys.stderr, flush=True)
            yield

    server.app.router.lifespan_context = lifespan


def log_config() -> dict[str, Any]:
    """uvicorn's logging, all of it on stderr."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    for handler in config["handlers"].values():
        handler["stream"] = "ext://sys.stderr"
    return config


def reap_children() -> None:
    """Stop every process this one started that is still running."""
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    for child in children:
        child.join(SHUTDOWN_SECONDS)
        if child.is_alive():
            child.kill()
            child.join()


def serve(server: ls.LitServer, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run `server` until SIGINT or SIGTERM; returns once all its processes have ended."""
    main_pid = os.getpid()

    def stop(signum: int, frame: Any) -> None:
        if os.getpid() != main_pid:  # a forked child that kept this handler: die as by default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)  # one stop is enough; the shutdown is bounded
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    url = f"http://{'[::1]' if host == '::' else host}:{port}"
    announce(server, f"ner serve: ready on {url} (the page: {url}/ui/, the API: POST /predict)")
    to_stderr = partial(configure_logging, stream=sys.stderr)
    try:
        with mock.patch.object(litserve.server, "configure_logging", to_stderr):
            server.run(
                host=host, port=port, log_level="warning", generate_client_file=False,
                log_config=log_config(), access_log=False,
            )  # fmt: skip
    except KeyboardInterrupt:
        pass  # stopped before LitServe took over its own shutdown
    except (EOFError, ConnectionError) as exc:  # LitServe's process manager went away
        raise NERError(f"the server stopped unexpectedly ({type(exc).__name__})") from None
    finally:
        reap_children()
        for s, handler in previous.items():
            signal.signal(s, handler)
