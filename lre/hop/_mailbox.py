"""``Mailbox``: callbacks posted from other threads, run in batches on one.

The one mechanism lre uses to cross between grpc.aio's asyncio threads and
the Trio thread, in both directions: the server-side bridge
(``lre.service``) and the client-side ``UpstreamLoop`` post through
mailboxes. The server bridge crosses in both directions several times per
request (start the Trio task, each stream
message, the end marker). Handing each callback over on its own costs a
socket write to wake the other loop and one loop iteration there; with
dozens of requests in flight those wake-ups and the GIL hand-offs between
the two threads cost more than the callbacks themselves.

A mailbox keeps the posted callbacks in a list and asks the owning loop to
run ``drain`` only when no drain is pending yet, so posts that arrive while
the owner is busy (the common case under load, since the owner needs the GIL
the poster holds) share one wake-up. Order is kept: callbacks run in the
order they were posted.

Failure: ``post`` raises whatever the owner's scheduling function raises
(``RuntimeError`` for a closed asyncio loop, ``trio.RunFinishedError`` for a
finished Trio run); the callback is then dropped and the mailbox stays
usable. An exception raised by a callback is logged and does not stop the
rest of the batch (an exception escaping a Trio ``run_sync_soon`` callback
would crash the Trio run).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class Mailbox:
    """Run posted callbacks on the thread that owns ``schedule``.

    ``schedule(fn)`` must queue ``fn()`` to run soon on the owning thread and
    be callable from any thread (``loop.call_soon_threadsafe`` or
    ``TrioToken.run_sync_soon``).
    """

    __slots__ = ("_lock", "_pending", "_schedule", "_scheduled", "drains")

    def __init__(self, schedule: Callable[[Callable[[], None]], object]) -> None:
        self._schedule = schedule
        self._lock = threading.Lock()
        self._pending: list[tuple[Callable[..., object], tuple[Any, ...]]] = []
        self._scheduled = False
        #: How many batches ran (for tests and benchmarks).
        self.drains = 0

    def post(self, callback: Callable[..., object], *args: Any) -> None:
        """Queue ``callback(*args)`` on the owning thread (any thread may call)."""
        with self._lock:
            self._pending.append((callback, args))
            if self._scheduled:
                return
            try:
                self._schedule(self._drain)
            except BaseException:
                # Nothing was pending before this post (a drain takes all and
                # clears the flag in one step), so only this callback is lost.
                self._pending.clear()
                raise
            self._scheduled = True

    def _drain(self) -> None:
        with self._lock:
            batch = self._pending
            self._pending = []
            self._scheduled = False
        self.drains += 1
        for callback, args in batch:
            try:
                callback(*args)
            except Exception:
                logger.exception("cross-thread callback %r failed", callback)
