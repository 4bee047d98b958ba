"""``q`` and Ctrl-C in the foreground dashboard of ``lre up``: stop lre without losing a build.

``ForegroundStop.press`` is called for each ``q`` and each SIGINT once the
dashboard runs:

- with nothing running or queued, lre stops at once;
- otherwise the dashboard says what stopping does and lre waits for its
  running and queued actions to finish, as ``lre down`` does (idle at two
  looks in a row, ``POLL_S`` apart, since a build sends its next actions
  right after the last ones end), then stops;
- a second press within ``WINDOW_S`` of the one before cancels them: lre
  stops at once (their clients see the actions cancelled).

A press after the window only says again what lre waits for (and opens a
new window). Before ``bind`` nothing is handled (``press`` returns False,
and SIGINT stops lre as it always did).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports trio and the app only when it serves
    import trio

    from lre.app import Application

#: Seconds in which a second press cancels what runs.
WINDOW_S = 5.0
#: Seconds between looks at the running and queued counts.
POLL_S = 0.5

Counts = Callable[[], Awaitable[tuple[int, int]]]


class ForegroundStop:
    """See the module docstring. ``counts()`` gives (running, queued)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._app: Application | None = None
        self._nursery: trio.Nursery | None = None
        self._counts: Counts | None = None
        self._last_press: float | None = None
        self._waiting = False
        self._shown: tuple[int, int] = (0, 0)
        #: The lines the dashboard shows while a stop waits (None: none).
        self.line: str | None = None

    def bind(self, app: Application, nursery: trio.Nursery, counts: Counts) -> None:
        """From now on ``press`` stops ``app`` (waiting in ``nursery``)."""
        self._app, self._nursery, self._counts = app, nursery, counts

    def press(self) -> bool:
        """One ``q`` or Ctrl-C; False when not bound yet (the caller stops lre itself)."""
        if self._app is None or self._nursery is None:
            return False
        now = self._clock()
        if self._waiting and self._last_press is not None and now - self._last_press <= WINDOW_S:
            running, queued = self._shown
            self.line = f"cancelling {running} running and {queued} queued action(s): lre stops now"
            self._app.request_stop()
            return True
        self._last_press = now
        if self._waiting:
            self._describe(*self._shown)
        else:
            self._waiting = True
            self.line = "stopping lre: looking for running actions…"
            self._nursery.start_soon(self._wait_then_stop)
        return True

    def _describe(self, running: int, queued: int) -> None:
        self._shown = (running, queued)
        self.line = (
            f"stopping lre once its {running} running and {queued} queued action(s) finish,\n"
            f"as `lre down` does; q or Ctrl-C again within {WINDOW_S:.0f} s cancels them"
        )

    async def _wait_then_stop(self) -> None:
        import trio

        assert self._app is not None and self._counts is not None
        counts = await self._counts()
        idle_seen = 1 if counts == (0, 0) else 0
        if idle_seen:
            self.line = "nothing running: lre stops now"
            self._app.request_stop()
            return
        self._describe(*counts)
        while idle_seen < 2:
            await trio.sleep(POLL_S)
            counts = await self._counts()
            if counts == (0, 0):
                idle_seen += 1
            else:
                idle_seen = 0
                if counts != self._shown:
                    self._describe(*counts)
        self.line = "all actions finished: lre stops now"
        self._app.request_stop()
