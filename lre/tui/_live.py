"""``run_dashboard``: keep the dashboard on the terminal, ~4 refreshes a second.

Rich ``Live`` with ``auto_refresh=False``: the Trio task renders and
refreshes, so snapshot sources that must run on the Trio thread (the
in-process ``SnapshotAssembler``) are called there and no rich thread runs.
In screen mode the alternate screen is redrawn in place (no flicker) and
restored on exit.

With ``quit_keys``, stdin (when a terminal) is put in cbreak mode and ``q``
ends the dashboard (or, with ``on_quit``, calls it and the dashboard goes
on); the terminal mode is restored on every exit path, including Ctrl-C
(which stays a ``KeyboardInterrupt`` for the caller).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
import termios
import tty
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager

import trio
from rich.console import Console, ConsoleDimensions, Group, RenderableType
from rich.live import Live
from rich.segment import Segment, SegmentLines
from rich.text import Text

from lre.snapshot import ProcessSnapshot
from lre.tui._render import TOP_FOOTER, render_dashboard

__all__ = ["SnapshotGetter", "cbreak", "run_dashboard"]

SnapshotGetter = Callable[[], ProcessSnapshot | Awaitable[ProcessSnapshot]]

QUIT_KEYS = frozenset(b"qQ")


@contextmanager
def cbreak(fd: int) -> Iterator[None]:
    """Put terminal ``fd`` in cbreak mode (keys arrive one by one, unechoed;
    Ctrl-C still signals) and restore its previous mode on exit (unless the
    terminal hung up)."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        try:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        except termios.error:  # the terminal is gone (hung up): nothing to restore
            pass


async def _watch_keys(
    fd: int, scope: trio.CancelScope, on_quit: Callable[[], object] | None
) -> None:
    while True:
        await trio.lowlevel.wait_readable(fd)
        data = os.read(fd, 64)
        if not data:  # the terminal is gone
            scope.cancel()
            return
        if any(byte in QUIT_KEYS for byte in data):
            if on_quit is None:
                scope.cancel()
                return
            on_quit()


def _screen(
    console: Console,
    snapshot: ProcessSnapshot | None,
    notice: str | None,
    keys: tuple[tuple[str, str], ...],
    notes: Sequence[str] = (),
    line: str | None = None,
) -> RenderableType:
    if snapshot is None:
        body: RenderableType = Text(
            notice or "waiting for the first snapshot…", style="bold red" if notice else ""
        )
    else:
        shown_line = len(line.splitlines()) if line else 0
        height = max(1, console.height - len(notes) - shown_line)
        if notice:
            # The last picture is stale: its header must not keep saying "ok".
            snapshot = dataclasses.replace(snapshot, problems=("figures from its last answer",))
        body = render_dashboard(
            snapshot, width=console.width, height=height, notice=notice, keys=keys
        )
    parts: list[RenderableType] = []
    if line:
        parts.append(Text(line, style="bold reverse", overflow="ellipsis", no_wrap=True))
    if notes:
        parts.append(Text("\n".join(notes), style="yellow", overflow="ellipsis", no_wrap=True))
    if not parts:
        return body
    return Group(*parts, body)


async def run_dashboard(
    get_snapshot: SnapshotGetter,
    *,
    console: Console | None = None,
    refresh_per_second: float = 4.0,
    quit_keys: bool = False,
    screen: bool = True,
    max_frames: int | None = None,
    notes: Sequence[str] = (),
    footer: tuple[tuple[str, str], ...] = TOP_FOOTER,
    on_quit: Callable[[], object] | None = None,
    status_line: Callable[[], str | None] | None = None,
) -> None:
    """Show the dashboard of ``get_snapshot()`` until cancelled, ``q`` (with
    ``quit_keys``) or ``max_frames`` refreshes (tests). ``notes`` are lines
    kept on top of every frame (what ``lre up`` wrote before the dashboard
    took the screen). ``on_quit``: ``q`` calls it instead of ending the
    dashboard. ``status_line()``, when it returns text (one line or a few),
    is shown in bold above the dashboard (what a stop in progress is waiting for).

    ``get_snapshot`` may be sync or async. ``OSError``/``ValueError`` from it
    (lre unreachable, a bad answer) keep the last screen with a red notice
    and retry at the next refresh; anything else propagates.
    """
    console = console if console is not None else Console()
    interval = 1.0 / refresh_per_second
    stdin_fd = sys.stdin.fileno() if quit_keys and sys.stdin.isatty() else None
    last: ProcessSnapshot | None = None
    shown: tuple[ConsoleDimensions, list[list[Segment]]] | None = None
    with (
        cbreak(stdin_fd) if stdin_fd is not None else _nothing(),
        Live(
            console=console,
            auto_refresh=False,
            screen=screen,
            transient=not screen,
            redirect_stdout=False,
            redirect_stderr=False,
        ) as live,
    ):
        async with trio.open_nursery() as nursery:
            if stdin_fd is not None:
                nursery.start_soon(_watch_keys, stdin_fd, nursery.cancel_scope, on_quit)
            frames = 0
            while max_frames is None or frames < max_frames:
                notice: str | None = None
                try:
                    result = get_snapshot()
                    if inspect.isawaitable(result):
                        result = await result
                    last = result
                except (OSError, ValueError) as exc:
                    notice = str(exc)
                # A frame equal to the one on the terminal is not sent again:
                # an idle dashboard changes once a second (its uptime), and
                # each redraw costs lre and the terminal a full screen.
                line = status_line() if status_line is not None else None
                frame = _screen(console, last, notice, footer, notes, line)
                lines = console.render_lines(frame, pad=False)
                if shown != (console.size, lines):
                    shown = (console.size, lines)
                    live.update(SegmentLines(lines, new_lines=True), refresh=True)
                frames += 1
                await trio.sleep(interval)
            nursery.cancel_scope.cancel()


@contextmanager
def _nothing() -> Iterator[None]:
    yield
