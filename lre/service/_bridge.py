"""The per-request hop between grpc.aio's asyncio thread and the Trio run.

Trio owns the process; grpc.aio runs on its own thread with its own asyncio
loop (see ``_server.py``). A servicer method (asyncio side) hands the real
work, written as a Trio coroutine or Trio async generator, to a
``TrioBridge``:

- ``await bridge.call(fn)``: runs ``await fn()`` in Trio and returns its
  value (unary responses).
- ``async for item in bridge.stream(fn)``: runs the Trio async iterable
  ``fn()`` and yields its items on the asyncio side (server streaming). At
  most ``buffer`` items are in flight; the Trio producer waits for credit
  (backpressure), so a slow client never makes the server buffer a blob.
- ``await bridge.call_now(fn)``: runs the plain function ``fn()`` on the
  Trio thread inside the hop's own callback, without a request task (work
  that never waits: a small blob written whole).
- ``await bridge.call_with_requests(fn, requests)``: runs ``await
  fn(trio_requests)`` in Trio, where ``trio_requests`` is a Trio async
  iterator over the asyncio ``requests`` (client streaming), again with at
  most ``buffer`` requests in flight.

How a request crosses (no thread ever blocks):

- In: the bridge's inbox (a ``Mailbox`` over ``TrioToken.run_sync_soon``)
  queues a callback on the Trio thread that does ``nursery.start_soon`` in
  the bridge's own nursery.
- Out: the Trio task posts results through its loop's outbox (a ``Mailbox``
  over ``loop.call_soon_threadsafe``). Mailboxes batch: posts made while a
  drain is pending share its wake-up (see ``lre.hop``).
- Cancellation, asyncio -> Trio: when grpc cancels the handler (client gone,
  deadline passed) the bridge posts ``cancel`` to the request's Trio cancel
  scope, even if the task has not started yet.
- Cancellation, Trio -> asyncio: if the Trio task is cancelled from the Trio
  side (the bridge is stopping), the asyncio side receives
  ``lre.errors.Unavailable``; a stream never looks cleanly finished when it
  was cut short, because the end marker carries the outcome.
- Errors: an ``Exception`` raised by ``fn`` is re-raised on the asyncio side
  unchanged (``lre.service._status`` maps it); ``trio.Cancelled`` is never
  caught.
- Shutdown races: if the Trio run has finished (``RunFinishedError``) or the
  bridge's nursery is closed, the asyncio side gets ``Unavailable``; if the
  asyncio loop is already closed, results are dropped (nobody waits).

Each kind of call starts its Trio side through one helper, ``_run``: a
request task under the call's cancel scope that either delivers its outcome
or, cut short, delivers ``Unavailable``.

Every callback that runs on the Trio thread is exception-safe: an exception
escaping a ``run_sync_soon`` callback would crash the Trio run.

Start the Trio side with ``await nursery.start(bridge.run)``; cancelling
that task cancels every request still running.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import math
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import trio

from lre.errors import Unavailable
from lre.hop import Mailbox

T = TypeVar("T")
Req = TypeVar("Req")

logger = logging.getLogger("lre.service.bridge")

_ITEM = 0
_END = 1
_ERROR = 2


@dataclass(frozen=True, slots=True)
class BridgeStatistics:
    """A snapshot of the bridge. ``running`` and ``started_total`` count
    Trio-side request tasks; ``immediate_total`` the ``call_now`` calls run
    in the hop's callback instead (no task)."""

    running: int
    started_total: int
    cancelled_total: int
    immediate_total: int = 0


def _stopping() -> Unavailable:
    return Unavailable("lre is shutting down; retry")


_OUTBOXES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Mailbox] = (
    weakref.WeakKeyDictionary()
)
_OUTBOXES_LOCK = threading.Lock()


def _outbox_for(loop: asyncio.AbstractEventLoop) -> Mailbox:
    """The mailbox that runs callbacks on ``loop`` (one per loop, made on first use)."""
    with _OUTBOXES_LOCK:
        outbox = _OUTBOXES.get(loop)
        if outbox is None:
            # The mailbox refers to its loop weakly, or the table would keep
            # every loop (its key) alive through its value.
            loop_ref = weakref.ref(loop)

            def schedule(drain: Callable[[], None]) -> None:
                target = loop_ref()
                if target is None:
                    raise RuntimeError("event loop is gone")
                target.call_soon_threadsafe(drain)

            outbox = _OUTBOXES[loop] = Mailbox(schedule)
        return outbox


def _post(outbox: Mailbox, callback: Callable[..., object], *args: Any) -> None:
    """Schedule ``callback(*args)`` on the outbox's loop; drop it if the loop is closed."""
    try:
        outbox.post(callback, *args)
    except RuntimeError:  # loop closed: the asyncio side is gone, nobody waits
        pass


def _set_result(future: asyncio.Future[T], value: T) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


class _Call:
    """Trio-side state of one request; touched only on the Trio thread."""

    __slots__ = ("cancel_requested", "scope")

    def __init__(self) -> None:
        self.scope: trio.CancelScope | None = None
        self.cancel_requested = False

    def attach(self, scope: trio.CancelScope) -> None:
        self.scope = scope
        if self.cancel_requested:
            scope.cancel()

    def cancel(self) -> None:
        self.cancel_requested = True
        if self.scope is not None:
            self.scope.cancel()


class _Credits:
    """A counter of items the Trio producer may still send (Trio thread only)."""

    __slots__ = ("available", "waiter")

    def __init__(self, available: int) -> None:
        self.available = available
        self.waiter: trio.Event | None = None

    def add(self, count: int) -> None:
        self.available += count
        if self.waiter is not None:
            self.waiter.set()
            self.waiter = None

    async def take(self) -> None:
        while self.available <= 0:
            self.waiter = trio.Event()
            await self.waiter.wait()
        self.available -= 1


class _StreamCall(_Call, Generic[T]):
    __slots__ = ("credits",)

    def __init__(self, buffer: int) -> None:
        super().__init__()
        self.credits = _Credits(buffer)


class _RequestFeed(_Call, Generic[Req]):
    """Requests travelling asyncio -> Trio through an unbounded Trio channel.

    The asyncio pump bounds what is in flight with an ``asyncio.Semaphore``;
    the Trio consumer returns credit as it takes requests.
    """

    __slots__ = ("receive", "send")

    def __init__(self) -> None:
        super().__init__()
        send, receive = trio.open_memory_channel[tuple[int, Any]](math.inf)
        self.send = send
        self.receive = receive

    def push(self, kind: int, payload: Any) -> None:
        try:
            self.send.send_nowait((kind, payload))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the Trio side stopped reading; the pump will be cancelled

    def close(self) -> None:
        self.send.close()


class TrioBridge:
    """Runs Trio work for asyncio handlers; see the module docstring.

    All public methods except ``run`` and ``statistics`` are called on the
    asyncio (grpc) thread; each raises ``lre.errors.Unavailable`` when the
    bridge is not running or is stopping.
    """

    def __init__(self) -> None:
        self._inbox: Mailbox | None = None
        self._nursery: trio.Nursery | None = None
        self._closed = False
        self._running = 0
        self._started_total = 0
        self._cancelled_total = 0
        self._immediate_total = 0

    # ------------------------------------------------------------ Trio side

    async def run(
        self, *, task_status: trio.TaskStatus[TrioBridge] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Own the nursery of request tasks until cancelled.

        Cancelling this task cancels every request task; their asyncio
        callers get ``Unavailable``.
        """
        try:
            async with trio.open_nursery() as nursery:
                self._inbox = Mailbox(trio.lowlevel.current_trio_token().run_sync_soon)
                self._nursery = nursery
                self._closed = False
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self._closed = True
            self._nursery = None

    def statistics(self) -> BridgeStatistics:
        """Counters, safe to read from any thread (values may be a moment old)."""
        return BridgeStatistics(
            self._running, self._started_total, self._cancelled_total, self._immediate_total
        )

    def _spawn(
        self,
        async_fn: Callable[..., Awaitable[None]],
        args: tuple[Any, ...],
        refuse: Callable[[], None],
    ) -> None:
        """(Trio thread) start one request task, or ``refuse()`` when stopping."""
        nursery = self._nursery
        if nursery is None or self._closed:
            refuse()
            return
        try:
            nursery.start_soon(async_fn, *args)
        except RuntimeError:  # nursery closed to new arrivals
            refuse()

    def _cancel_call(self, call: _Call) -> None:
        """(Trio thread) the asyncio side gave up on ``call``."""
        if not call.cancel_requested:
            self._cancelled_total += 1
        call.cancel()

    def _submit(self, callback: Callable[..., object], *args: Any) -> None:
        """(asyncio thread) queue ``callback(*args)`` on the Trio thread."""
        inbox = self._inbox
        if inbox is None:
            raise _stopping()
        try:
            inbox.post(callback, *args)
        except trio.RunFinishedError:
            raise _stopping() from None

    def _request_cancel(self, call: _Call) -> None:
        """(asyncio thread) cancel ``call``'s Trio task; ignore a finished run."""
        inbox = self._inbox
        if inbox is None:
            return
        try:
            inbox.post(self._cancel_call, call)
        except trio.RunFinishedError:
            pass

    async def _run(
        self,
        call: _Call,
        body: Callable[[], Awaitable[None]],
        fail: Callable[[BaseException], None],
    ) -> None:
        """(Trio thread) one request task: ``await body()`` under ``call``'s
        cancel scope; ``body`` posts its own outcome. An exception it raises
        goes to ``fail``; when it was cancelled before delivering (the bridge
        is stopping, or the asyncio side gave up), ``fail`` gets
        ``Unavailable``."""
        self._running += 1
        self._started_total += 1
        delivered = False
        try:
            with trio.CancelScope() as scope:
                call.attach(scope)
                await body()
                delivered = True
        except Exception as exc:
            fail(exc)
            delivered = True
        finally:
            self._running -= 1
            if not delivered:
                fail(_stopping())

    # ------------------------------------------------------------ unary

    async def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``await fn()`` in Trio and return its value (or raise its exception)."""
        loop = asyncio.get_running_loop()
        outbox = _outbox_for(loop)
        future: asyncio.Future[T] = loop.create_future()
        call = _Call()
        fail = functools.partial(_post, outbox, _set_exception, future)

        async def body() -> None:  # Trio thread
            _post(outbox, _set_result, future, await fn())

        self._submit(self._spawn, self._run, (call, body, fail), lambda: fail(_stopping()))
        try:
            return await future
        except asyncio.CancelledError:
            self._request_cancel(call)
            raise

    async def call_now(self, fn: Callable[[], T]) -> T:
        """Run the plain function ``fn()`` on the Trio thread, in the inbox's
        callback itself (no request task, no cancel scope), and return its
        value or raise its exception here.

        For work that never waits (a small blob written whole); ``fn`` must not
        block on anything but a quick system call and cannot be cancelled once
        it started: when the asyncio side gives up first, its result is dropped.
        Raises ``Unavailable`` when the bridge is not running or is stopping.
        """
        loop = asyncio.get_running_loop()
        outbox = _outbox_for(loop)
        future: asyncio.Future[T] = loop.create_future()
        self._submit(self._run_now, fn, outbox, future)
        return await future

    def _run_now(self, fn: Callable[[], T], outbox: Mailbox, future: asyncio.Future[T]) -> None:
        """(Trio thread) ``call_now``'s callback; it never raises."""
        if self._nursery is None or self._closed:
            _post(outbox, _set_exception, future, _stopping())
            return
        self._immediate_total += 1
        try:
            value = fn()
        except Exception as exc:
            _post(outbox, _set_exception, future, exc)
            return
        _post(outbox, _set_result, future, value)

    # ------------------------------------------------------------ server streaming

    async def stream(
        self, fn: Callable[[], AsyncIterable[T]], *, buffer: int = 8
    ) -> AsyncIterator[T]:
        """Yield the items of the Trio async iterable ``fn()`` on the asyncio side.

        At most ``buffer`` items are queued between the threads. Closing or
        cancelling this generator early cancels the Trio producer. An
        exception of the producer is raised here after the items before it.
        """
        if buffer < 1:
            raise ValueError(f"buffer: {buffer} must be at least 1")
        loop = asyncio.get_running_loop()
        outbox = _outbox_for(loop)
        queue: collections.deque[tuple[int, Any]] = collections.deque()
        wakeup: list[asyncio.Future[None] | None] = [None]

        def deliver(kind: int, payload: Any) -> None:  # asyncio thread
            queue.append((kind, payload))
            waiter = wakeup[0]
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

        call: _StreamCall[T] = _StreamCall(buffer)
        fail = functools.partial(_post, outbox, deliver, _ERROR)

        async def body() -> None:  # Trio thread
            iterable = fn()
            try:
                async for item in iterable:
                    await call.credits.take()
                    _post(outbox, deliver, _ITEM, item)
            finally:
                aclose = getattr(iterable, "aclose", None)
                if aclose is not None:
                    await aclose()
            _post(outbox, deliver, _END, None)

        self._submit(self._spawn, self._run, (call, body, fail), lambda: fail(_stopping()))
        return_at = max(1, buffer // 2)
        consumed = 0
        finished = False
        try:
            while True:
                while not queue:
                    waiter = loop.create_future()
                    wakeup[0] = waiter
                    await waiter
                wakeup[0] = None
                kind, payload = queue.popleft()
                if kind == _ITEM:
                    consumed += 1
                    if consumed >= return_at:
                        self._submit(call.credits.add, consumed)
                        consumed = 0
                    yield payload
                elif kind == _END:
                    finished = True
                    return
                else:
                    finished = True
                    raise payload
        finally:
            if not finished:
                self._request_cancel(call)

    # ------------------------------------------------------------ client streaming

    async def call_with_requests(
        self,
        fn: Callable[[AsyncIterator[Req]], Awaitable[T]],
        requests: AsyncIterable[Req],
        *,
        buffer: int = 8,
    ) -> T:
        """Run ``await fn(trio_requests)`` in Trio, feeding it the asyncio ``requests``.

        At most ``buffer`` requests are in flight between the threads. If
        ``fn`` returns before consuming every request, the rest are not read.
        An exception raised while reading ``requests`` is raised inside ``fn``
        by its iterator.
        """
        if buffer < 1:
            raise ValueError(f"buffer: {buffer} must be at least 1")
        loop = asyncio.get_running_loop()
        outbox = _outbox_for(loop)
        future: asyncio.Future[T] = loop.create_future()
        feed: _RequestFeed[Req] = _RequestFeed()
        credit = asyncio.Semaphore(buffer)

        def release(count: int) -> None:  # asyncio thread
            for _ in range(count):
                credit.release()

        return_at = max(1, buffer // 2)
        fail = functools.partial(_post, outbox, _set_exception, future)

        async def trio_requests() -> AsyncGenerator[Req, None]:  # Trio thread
            taken = 0
            async for kind, payload in feed.receive:
                if kind == _ERROR:
                    raise payload
                taken += 1
                if taken >= return_at:
                    _post(outbox, release, taken)
                    taken = 0
                yield payload

        async def body() -> None:  # Trio thread
            iterator = trio_requests()
            try:
                value = await fn(iterator)
            finally:
                await iterator.aclose()
                feed.receive.close()
            _post(outbox, _set_result, future, value)

        self._submit(self._spawn, self._run, (feed, body, fail), lambda: fail(_stopping()))
        pump = asyncio.ensure_future(self._pump(feed, requests, credit))
        try:
            return await future
        except asyncio.CancelledError:
            self._request_cancel(feed)
            raise
        finally:
            pump.cancel()

    async def _pump(
        self, feed: _RequestFeed[Req], requests: AsyncIterable[Req], credit: asyncio.Semaphore
    ) -> None:
        """(asyncio thread) forward ``requests`` into ``feed`` as credit allows."""
        try:
            async for request in requests:
                await credit.acquire()
                self._submit(feed.push, _ITEM, request)
            self._submit(feed.close)
        except Exception as exc:
            try:
                self._submit(feed.push, _ERROR, exc)
            except Unavailable:
                pass
