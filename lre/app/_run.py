"""Run an Application in the foreground until SIGINT/SIGTERM.

Trio owns the process: ``trio.run`` here, signals received with
``trio.open_signal_receiver`` (explicit handlers, so a server started from a
non-interactive shell that ignores SIGINT still stops on SIGTERM and Ctrl-C).
The first signal begins the ordered shutdown; a second one cancels at once
(running actions are still killed and reaped by their cancel scopes).
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable

import trio

from lre.app._app import Application, ReadyInfo
from lre.config import Config

log = logging.getLogger(__name__)


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


async def serve_until_signal(
    app: Application, on_ready: Callable[[ReadyInfo], None] | None = None
) -> None:
    """Serve ``app`` until SIGINT or SIGTERM, then shut it down in order."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: app.serve(on_ready=on_ready, task_status=task_status)
            )

            async def watch_signals() -> None:
                count = 0
                async for signum in signals:
                    count += 1
                    name = signal.Signals(signum).name
                    if count == 1:
                        log.info("%s received: shutting down (again to force)", name)
                        print(f"lre: {name} received, shutting down", file=sys.stderr)
                        app.request_stop()
                    else:
                        log.warning("%s received again: cancelling everything", name)
                        nursery.cancel_scope.cancel()

            nursery.start_soon(watch_signals)
            await app.stopped.wait()
            nursery.cancel_scope.cancel()


def run_server(
    config: Config,
    *,
    on_ready: Callable[[ReadyInfo], None] | None = None,
    dashboard: bool = False,
    log_level: str | None = None,
) -> None:
    """Build lre from ``config`` (resolved) and serve in the foreground.

    Raises what start-up raises (e.g. ``OSError`` for a port in use,
    ``WorkDirectoryInUse``); returns after a clean shutdown.
    """
    _configure_logging(log_level or config.global_.log_level)
    app = Application(config)
    trio.run(serve_until_signal, app, on_ready)
