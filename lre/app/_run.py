"""Run an Application in the foreground until SIGINT/SIGTERM/SIGHUP.

Trio owns the process: ``trio.run`` here, signals received with
``trio.open_signal_receiver`` (explicit handlers, so a server started from a
non-interactive shell that ignores SIGINT still stops on SIGTERM and Ctrl-C).
SIGHUP (the terminal of a foreground lre closed) stops it as the other two
do: a server nobody watches any more must still make its clients' config
inert. The first signal begins the ordered shutdown; a second one cancels at once
(running actions are still killed and reaped by their cancel scopes).
With ``on_interrupt`` (the foreground dashboard's stop, which waits for
running actions first), SIGINT goes to it instead whenever it takes it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TextIO

import trio

from lre.app._app import Application, ReadyInfo
from lre.app._limits import raise_open_files_limit
from lre.app._logging import configure_logging, log_file
from lre.config import Config, state_dir_of
from lre.worker import keep_reserve

log = logging.getLogger(__name__)


async def _serve_until_signal(
    app: Application,
    on_ready: Callable[[ReadyInfo], None] | None = None,
    companion: Callable[[Application], Awaitable[None]] | None = None,
    on_interrupt: Callable[[], bool] | None = None,
) -> None:
    """Serve ``app`` until SIGINT, SIGTERM or SIGHUP, then shut it down in order.

    ``on_interrupt`` is asked first about each SIGINT; when it returns True
    it has dealt with it (and asks ``app`` to stop when it decides to)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: app.serve(on_ready=on_ready, task_status=task_status)
            )

            async def watch_signals() -> None:
                count = 0
                async for signum in signals:
                    if signum == signal.SIGINT and on_interrupt is not None and on_interrupt():
                        continue
                    count += 1
                    name = signal.Signals(signum).name
                    if count == 1:
                        log.info("%s received: shutting down (again to force)", name)
                        try:
                            print(f"lre: {name} received, shutting down", file=sys.stderr)
                        except OSError:  # the terminal is gone (SIGHUP)
                            pass
                        app.request_stop()
                    else:
                        log.warning("%s received again: cancelling everything", name)
                        nursery.cancel_scope.cancel()

            nursery.start_soon(watch_signals)
            if companion is not None:
                nursery.start_soon(companion, app)
            await app.stopped.wait()
            nursery.cancel_scope.cancel()


def _is_file(stream: TextIO, path: Path) -> bool:
    """Whether ``stream`` writes into the file at ``path``."""
    try:
        mine, theirs = os.fstat(stream.fileno()), os.stat(path)
    except (OSError, ValueError):
        return False
    return (mine.st_ino, mine.st_dev) == (theirs.st_ino, theirs.st_dev)


def run_server(
    config: Config,
    *,
    on_ready: Callable[[ReadyInfo], None] | None = None,
    companion: Callable[[Application], Awaitable[None]] | None = None,
    log_level: str | None = None,
    log_to_file: bool = False,
    on_interrupt: Callable[[], bool] | None = None,
) -> None:
    """Build lre from ``config`` (resolved) and serve in the foreground.

    ``companion`` runs beside the server once it is ready (the CLI passes
    the dashboard; the app cannot import ``tui``). With ``log_to_file`` logs
    go to ``<state_dir>/lre.log`` instead of stderr (so the dashboard owns
    the terminal). ``on_interrupt``: see ``_serve_until_signal``.

    Raises what start-up raises (e.g. ``OSError`` for a port in use,
    ``WorkDirectoryInUse``); returns after a clean shutdown.
    """
    level = log_level or config.global_.log_level
    state_dir = state_dir_of(config)
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    path = log_file(state_dir)
    if log_to_file:
        configure_logging(level, file=path)
    elif _is_file(sys.stderr, path):  # detached: stderr already is the log file
        configure_logging(level, stream=sys.stderr)
    else:  # the terminal, and the file `lre logs` reads
        configure_logging(level, file=path, stream=sys.stderr)
    raise_open_files_limit(config.global_.max_open_files)
    keep_reserve()  # for lre's own upkeep when clients hold every other one
    app = Application(config)
    trio.run(_serve_until_signal, app, on_ready, companion, on_interrupt)
