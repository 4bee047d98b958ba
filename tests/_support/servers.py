"""Starting the real servers tests talk to, all on 127.0.0.1.

``start_server`` runs lre's ``GrpcServer`` with the cache services in the
test's Trio nursery; ``serve_app`` starts a whole ``Application`` there;
``ServerThread`` runs one in a thread of its own (its own ``trio.run``), for
synchronous tests and fixtures that outlive one test's Trio run.
"""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import trio

from lre.app import Application, ReadyInfo
from lre.service import (
    CacheServiceOptions,
    GrpcServer,
    InstanceBackends,
    Instances,
    ServerOptions,
    Servicer,
    TrioBridge,
    cache_servicers,
)
from tests._support.configs import WORKER_EXTRA, app_config_text, config_of


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (nothing listens there now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def start_server(
    nursery: trio.Nursery,
    backends: dict[str, InstanceBackends],
    *,
    options: CacheServiceOptions | None = None,
    extra: Callable[[TrioBridge], list[Servicer]] | None = None,
) -> tuple[str, TrioBridge, Instances]:
    """The cache services over ``backends`` (plus ``extra``'s servicers) on
    127.0.0.1:0 in ``nursery``; the bound address, the bridge and the instances."""
    instances = Instances(backends)
    bridge = TrioBridge()
    servicers: list[Servicer] = list(cache_servicers(bridge, instances, options))
    if extra is not None:
        servicers.extend(extra(bridge))
    server = GrpcServer(ServerOptions(address="127.0.0.1:0", grace_seconds=0.5), servicers, bridge)
    address: str = await nursery.start(server.serve)
    return address, bridge, instances


async def serve_app(app: Application, *, task_status: trio.TaskStatus[ReadyInfo]) -> None:
    """``app.serve`` for ``nursery.start(serve_app, app)``: returns the ReadyInfo."""
    await app.serve(task_status=task_status)


class ServerThread:
    """An Application running in a thread of its own until :meth:`stop`.

    If the application fails to start, ``start`` raises what it raised; if it
    does not stop within a minute, ``stop`` fails an assertion.
    """

    def __init__(self, root: Path, config_text: str | None = None) -> None:
        """``config_text`` defaults to ``app_config_text(root)`` with ``WORKER_EXTRA``."""
        text = config_text or app_config_text(root, max_inflight=2, extra_worker=WORKER_EXTRA)
        self.root = root
        self.app = Application(config_of(text, source="integration.json5"))
        self._started: queue.Queue[ReadyInfo | BaseException] = queue.Queue()
        self._token: trio.lowlevel.TrioToken | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="lre-app", daemon=True)
        self.ready: ReadyInfo | None = None

    def start(self) -> ReadyInfo:
        """Start the thread; the bound addresses once the server listens."""
        self._thread.start()
        started = self._started.get(timeout=60)
        if isinstance(started, BaseException):
            raise started
        self.ready = started
        return started

    def stop(self) -> None:
        if self._token is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self.app.request_stop, trio_token=self._token)
        self._thread.join(60)
        assert not self._thread.is_alive(), "the Application did not stop within 60 s"
        if self._error is not None:
            raise self._error

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as error:  # reported to the fixture, in either phase
            self._error = error
            self._started.put(error)

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            ready: ReadyInfo = await nursery.start(serve_app, self.app)
            self._started.put(ready)
            await self.app.stopped.wait()
