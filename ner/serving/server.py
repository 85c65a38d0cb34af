"""`ner serve`'s HTTP side on LitServe: the app, its routes, and a run that stops cleanly.

Routes: `POST /predict` (validated here, in the HTTP process, admitted under the bound on held
texts, then queued to the inference worker, `ner.serving.batcher`, and answered within the
deadline: `ner.serving.admission`), `GET /health` (LitServe's: ready only once every worker has
loaded the model; answered by the HTTP process itself, never queued behind tagging), `GET /info`
(the model's description, limits, batching and admission policy, and the texts held now),
`GET /ui/` (the page, static files shipped in the package). Every error is a one-line JSON
`{"error": "..."}`.

`serve` runs the server until SIGINT or SIGTERM and leaves no process behind: LitServe handles
Ctrl-C (KeyboardInterrupt) but not SIGTERM, which would kill the main process and orphan its
workers, so SIGTERM takes the same path. It drains (`ner.serving.shutdown`): new requests are
refused (503, then the connection), every HTTP process answers the requests it holds (each within
the deadline) and ends, at most `Policy.drain` seconds later; then the workers end, and whatever
child is left is terminated. Logs go to stderr (LitServe's default stream is stdout), access logs
are off.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import signal
import socket
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
from litserve.utils import LitAPIStatus, ResponseBufferItem, configure_logging
from starlette.exceptions import HTTPException

from ner.inference.routine import Tagger
from ner.serving.admission import Admission, Busy, Policy, late_message
from ner.serving.api import Limits, RequestError, parse_request
from ner.serving.batcher import TaggingAPI
from ner.serving.shutdown import begin_drain, drainable, reap_children
from ner.utils.errors import NERError

UI = Path(__file__).resolve().parent / "ui"
HOSTS = ("127.0.0.1", "0.0.0.0", "::")  # what LitServe binds


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The one shape of every error answer."""
    return JSONResponse({"error": message}, status_code=status, headers=headers)


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


async def answer_of(
    server: ls.LitServer, handler: RegularRequestHandler, work: dict, deadline: float
) -> dict[str, Any]:
    """The worker's answer to `work`, or a 504 answer once `deadline` seconds have passed.
    LitServe's `RegularRequestHandler.handle_request` with a deadline, whose buffer entry goes
    whatever happens (theirs would stay behind a cancelled wait)."""
    # nothing awaits between the submission and the entry: no answer can come before its entry
    uid, _ = await handler._submit_request(work)
    item = server.response_buffer[uid] = ResponseBufferItem(asyncio.Event())
    try:
        await asyncio.wait_for(item.event.wait(), deadline)
    except asyncio.TimeoutError:
        return {"error": late_message(deadline), "status": 504}
    finally:
        server.response_buffer.pop(uid, None)
    response, status = item.response
    if status == LitAPIStatus.ERROR:  # LitServe's own (a worker died with it): raised, a 500
        handler._handle_error_response(response)
    return response


def predict_endpoint(
    server: ls.LitServer, api: TaggingAPI, limits: Limits, admission: Admission
) -> Callable:
    """`POST /predict`: validate, admit, queue to the workers through LitServe, answer JSON."""
    handler = RegularRequestHandler(api, server)

    async def predict(request: Request) -> Response:
        try:
            work = parse_request(await read_body(request, limits.max_body), limits)
            admission.admit(len(work["items"]))
        except Busy as exc:
            return error(503, exc.message, {"Retry-After": str(exc.retry_after)})
        except RequestError as exc:
            return error(exc.status, exc.message)
        try:
            answer = await answer_of(server, handler, work, admission.policy.deadline)
        finally:
            admission.release(len(work["items"]))
        if "error" in answer:  # past the deadline, or could not be tagged (`batcher.failure`)
            return error(answer["status"], answer["error"])
        body = json.dumps(answer, ensure_ascii=False).encode("utf-8")
        return Response(body, media_type="application/json")

    return predict


def info_endpoint(server: ls.LitServer, admission: Admission) -> tuple[Callable, list]:
    """`GET /info`: LitServe's, and the texts held now; (the endpoint, LitServe's checks)."""
    route = next(r for r in server.app.router.routes if getattr(r, "path", None) == "/info")
    litserve_info = route.endpoint

    async def info(request: Request) -> JSONResponse:
        data = json.loads((await litserve_info(request)).body)
        return JSONResponse({**data, "queue": admission.state()})

    return info, route.dependencies


def install_routes(
    server: ls.LitServer, api: TaggingAPI, limits: Limits, admission: Admission
) -> None:
    """Replace LitServe's `/predict` with the validating one, its `/info` with one that tells
    the queue, and its `/` with a way to the page; add the page and JSON errors."""
    app = server.app
    info, checks = info_endpoint(server, admission)
    replaced = (api.api_path, "/", "/info")
    app.router.routes = [r for r in app.router.routes if getattr(r, "path", None) not in replaced]
    app.add_api_route(
        api.api_path, predict_endpoint(server, api, limits, admission), methods=["POST"]
    )
    app.add_api_route("/info", info, methods=["GET"], dependencies=checks)
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
    batch_timeout: float = 0.0,
    workers: int = 1,
    threads: int | None = None,
    max_pieces: int | None = None,
    policy: Policy | None = None,
) -> ls.LitServer:
    """A LitServer tagging with the model `loader` returns (in each of `workers` processes);
    `info` (JSON) describes it at `/info`, beside the limits, the batching and the admission
    `policy` (default: no bound on held texts, a 30 s deadline). The server's `admission` is
    the state its HTTP processes share."""
    limits, policy = limits or Limits(), policy or Policy()
    api = TaggingAPI(loader, max_batch_size, batch_timeout, threads, max_pieces)
    batching = {"max_batch_size": max_batch_size, "batch_timeout": batch_timeout,
                "max_pieces": max_pieces}  # fmt: skip
    metadata = {**info, "limits": limits.as_dict(), "batching": batching, "workers": workers,
                "threads": threads, "admission": policy.as_dict()}  # fmt: skip
    # timeout: a worker drops requests that waited past the deadline (`PoolingLoop`);
    # restart_workers: a worker that dies (killed for memory) is replaced, its requests get a 500
    server = ls.LitServer(
        api, accelerator="cpu", workers_per_device=workers, timeout=policy.deadline,
        model_metadata=metadata, restart_workers=True,
    )  # fmt: skip
    # how long a stopped HTTP process may answer what it holds (uvicorn's graceful shutdown),
    # and how long LitServe waits for it before killing it
    server.uvicorn_graceful_timeout = policy.drain
    server.admission = Admission(policy)
    install_routes(server, api, limits, server.admission)
    return server


# Seconds an idle keep-alive connection stays open. uvicorn's 5 s equals the idle expiry of
# httpx's pools: a client may then send on a connection the server is closing and get a read
# error for a request it cannot safely retry. A server should outlast its clients' idle timeout.
KEEP_ALIVE = 75


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


def serve(server: ls.LitServer, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run `server` until SIGINT or SIGTERM, then drain it; returns once all its processes have
    ended."""
    main_pid = os.getpid()
    listening: list[socket.socket] = []

    def stop(signum: int, frame: Any) -> None:
        if os.getpid() != main_pid:  # a forked child that kept this handler: die as by default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)  # one stop is enough; the shutdown is bounded
        begin_drain(server.admission, listening, signum)
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    url = f"http://{'[::1]' if host == '::' else host}:{port}"
    announce(server, f"ner serve: ready on {url} (the page: {url}/ui/, the API: POST /predict)")
    to_stderr = partial(configure_logging, stream=sys.stderr)
    try:
        with (
            mock.patch.object(litserve.server, "configure_logging", to_stderr),
            drainable(listening),
        ):
            server.run(
                host=host, port=port, log_level="warning", generate_client_file=False,
                log_config=log_config(), access_log=False, timeout_keep_alive=KEEP_ALIVE,
            )  # fmt: skip
    except KeyboardInterrupt:
        pass  # stopped before LitServe took over its own shutdown
    except (EOFError, ConnectionError) as exc:  # LitServe's process manager went away
        raise NERError(f"the server stopped unexpectedly ({type(exc).__name__})") from None
    finally:
        reap_children()
        for s, handler in previous.items():
            signal.signal(s, handler)
