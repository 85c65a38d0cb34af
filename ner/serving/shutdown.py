"""How `ner serve` stops: it drains, then leaves no process behind.

On SIGTERM (`ner.serving.server.serve` turns it into LitServe's KeyboardInterrupt) the main
process first refuses new requests (`Admission.stop`: 503 on a connection already open), closes
its copy of the listening socket and signals every HTTP process at once; each then closes its own
copy (so new connections are refused), answers the requests it holds (within the deadline) and
ends. LitServe then waits for them (`uvicorn_graceful_timeout`, the drain timeout) and ends the
workers and its manager; `reap_children` ends whatever is left.

Send the signal to the main process, as `kill PID`, Docker and Kubernetes do: a signal to the
whole process group (systemd's default `KillMode=control-group`; use `KillMode=mixed`) ends the
workers and LitServe's manager at once, with the requests they hold.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from multiprocessing.managers import SyncManager
from unittest import mock

import uvicorn.config

from ner.serving.admission import Admission

SHUTDOWN_SECONDS = 5  # how long a child left after LitServe's shutdown may take to end


def close_all(sockets: list[socket.socket]) -> None:
    """Close this process's copies of `sockets`."""
    for sock in sockets:
        sock.close()


def manager_without(listening: list[socket.socket]) -> Callable[[], SyncManager]:
    """LitServe's `multiprocessing.Manager()`, without the listening socket: it forks the
    manager after binding it, and a process that kept a copy would keep the port taking
    connections after a stop, left unanswered."""

    def manager() -> SyncManager:
        started = SyncManager(ctx=multiprocessing.get_context())
        forked = multiprocessing.get_start_method() == "fork"  # else it inherits no socket
        started.start(partial(close_all, listening) if forked else None)
        return started

    return manager


@contextmanager
def drainable(listening: list[socket.socket]) -> Iterator[None]:
    """While LitServe runs: keep the listening socket it binds in `listening` (it keeps it to
    itself), and fork its manager without it."""
    bind_socket = uvicorn.config.Config.bind_socket

    def bind_and_keep(config: uvicorn.config.Config) -> socket.socket:
        listening.append(bind_socket(config))
        return listening[-1]

    with (
        mock.patch.object(uvicorn.config.Config, "bind_socket", bind_and_keep),
        mock.patch.object(multiprocessing, "Manager", manager_without(listening)),
    ):
        yield


def begin_drain(admission: Admission, listening: list[socket.socket], signum: int) -> None:
    """Refuse new requests, and have every HTTP process answer what it holds and end."""
    admission.stop()
    # once the HTTP processes close theirs too, new connections are refused rather than left
    # waiting in the backlog
    close_all(listening)
    if signum != signal.SIGTERM:
        return  # Ctrl-C reached them from the terminal; one more SIGINT would make uvicorn quit
    for child in multiprocessing.active_children():
        # all at once: LitServe stops them one after another, each taking new requests meanwhile
        if child.name.startswith("LitServer-"):
            os.kill(child.pid, signal.SIGTERM)


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
