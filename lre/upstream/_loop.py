"""The client-side hop from Trio to grpc.aio running on its own asyncio thread.

lre's upstream clients use grpc.aio, which needs an asyncio loop; Trio owns
the main thread. ``UpstreamLoop`` runs one asyncio loop on a daemon thread
and lets Trio code ``await loop.run(fn)``, where ``fn`` is an asyncio
coroutine function executed on that loop. No thread ever blocks on a
request:

- Trio -> asyncio: ``asyncio.run_coroutine_threadsafe`` queues the
  coroutine on the loop.
- asyncio -> Trio: the finished future wakes the waiting Trio task through
  the loop's ``Mailbox`` over ``TrioToken.run_sync_soon`` (the same
  mechanism the server-side bridge of ``lre.service`` uses): wake-ups of
  calls that finish while Trio is busy share one hand-over.
- Cancellation: cancelling the Trio task cancels the asyncio task (the grpc
  call is cancelled on the wire) and ``trio.Cancelled`` propagates
  unchanged.

This is the mirror of ``lre.service``'s server-side bridge; both cross
with ``lre.hop.Mailbox``. Why not sync
grpc stubs in ``trio.to_thread``: one hop here costs two cross-thread
wake-ups (about 30-60 us), needs no worker thread per in-flight call (an
upstream read of a large blob would pin a thread for its whole duration),
and cancellation reaches the wire; see docs/upstream.md for the figures.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from lre.hop import Mailbox, name_os_thread

T = TypeVar("T")


class UpstreamLoop:
    """An asyncio loop on a daemon thread, started on first use.

    ``run`` may be called from any Trio task of the run that uses the
    loop. ``aclose`` stops the loop and joins its thread; calls after that
    start a new loop.
    """

    def __init__(self, name: str = "lre-upstream") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._inbox: tuple[trio.lowlevel.TrioToken, Mailbox] | None = None

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(
                    target=self._main, args=(loop, ready), name=self.name, daemon=True
                )
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @staticmethod
    def _main(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        name_os_thread(threading.current_thread().name)
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
            pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    async def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``await fn()`` on the asyncio thread and return its value.

        The coroutine's exception is raised here unchanged. Cancelling the
        caller cancels the coroutine (without waiting for it to finish).
        """
        loop = self._ensure()
        inbox = self._inbox_of(trio.lowlevel.current_trio_token())
        done = trio.Event()

        async def body() -> T:
            return await fn()

        future = asyncio.run_coroutine_threadsafe(body(), loop)

        def wake(_: object) -> None:
            try:
                inbox.post(done.set)
            except trio.RunFinishedError:
                pass  # the Trio run is over; nobody waits for the result

        future.add_done_callback(wake)
        finished = False
        try:
            await done.wait()
            finished = True
        finally:
            if not finished:
                future.cancel()
        return future.result()

    def _inbox_of(self, token: trio.lowlevel.TrioToken) -> Mailbox:
        """The mailbox into the Trio run of ``token`` (a new one for a new run)."""
        current = self._inbox
        if current is None or current[0] is not token:
            current = self._inbox = (token, Mailbox(token.run_sync_soon))
        return current[1]

    def post(self, fn: Callable[[], object]) -> None:
        """Run the plain callable ``fn()`` soon on the asyncio thread (no result)."""
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(fn)
        except RuntimeError:
            pass  # loop closed

    async def aclose(self) -> None:
        """Stop the loop (cancelling what still runs on it) and join its thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:
            return
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(thread.join)
