"""Mailbox: callbacks from another thread run in order on the owner's loop,
and a burst posted while the owner is busy shares one wake-up."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator

import pytest
import trio

from lre.hop import Mailbox

#: The thread id running each fixture loop.
OWNERS: dict[asyncio.AbstractEventLoop, int | None] = {}


@pytest.fixture
def loop_thread() -> Iterator[asyncio.AbstractEventLoop]:
    """A real asyncio loop running in its own thread (as grpc.aio's does)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    OWNERS[loop] = thread.ident
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()
    del OWNERS[loop]


def test_callbacks_run_on_the_owner_thread_in_posting_order(
    loop_thread: asyncio.AbstractEventLoop,
) -> None:
    mailbox = Mailbox(loop_thread.call_soon_threadsafe)
    seen: list[tuple[int, int]] = []
    done = threading.Event()
    for i in range(2000):
        mailbox.post(lambda i=i: seen.append((i, threading.get_ident())))
    mailbox.post(done.set)
    assert done.wait(10)
    assert [i for i, _ in seen] == list(range(2000))
    assert {ident for _, ident in seen} == {OWNERS[loop_thread]}


def test_posts_made_while_the_owner_is_busy_share_one_drain(
    loop_thread: asyncio.AbstractEventLoop,
) -> None:
    mailbox = Mailbox(loop_thread.call_soon_threadsafe)
    release = threading.Event()
    done = threading.Event()
    loop_thread.call_soon_threadsafe(release.wait, 10)  # the owner is busy
    for _ in range(500):
        mailbox.post(lambda: None)
    mailbox.post(done.set)
    release.set()
    assert done.wait(10)
    assert mailbox.drains == 1


def test_a_failing_callback_does_not_stop_the_batch(
    loop_thread: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    mailbox = Mailbox(loop_thread.call_soon_threadsafe)
    done = threading.Event()

    def broken() -> None:
        raise ValueError("boom")

    mailbox.post(broken)
    mailbox.post(done.set)
    assert done.wait(10)
    assert "cross-thread callback" in caplog.text and "boom" in caplog.text


def test_a_refused_post_raises_and_loses_only_its_own_callback() -> None:
    scheduled: list[Callable[[], None]] = []
    refuse = [True]

    def schedule(drain: Callable[[], None]) -> None:
        if refuse[0]:
            raise RuntimeError("loop closed")
        scheduled.append(drain)

    mailbox = Mailbox(schedule)
    ran: list[str] = []
    with pytest.raises(RuntimeError, match="loop closed"):
        mailbox.post(ran.append, "lost")
    refuse[0] = False
    mailbox.post(ran.append, "kept")
    mailbox.post(ran.append, "kept too")
    assert len(scheduled) == 1  # the second post rode on the pending drain
    scheduled[0]()
    assert ran == ["kept", "kept too"]


async def test_trio_side_posts_from_a_thread_run_in_the_trio_thread() -> None:
    mailbox = Mailbox(trio.lowlevel.current_trio_token().run_sync_soon)
    trio_thread = threading.get_ident()
    seen: list[int] = []
    done = trio.Event()

    def post_from_thread() -> None:
        for _ in range(100):
            mailbox.post(lambda: seen.append(threading.get_ident()))
        mailbox.post(done.set)

    await trio.to_thread.run_sync(post_from_thread)
    with trio.fail_after(10):
        await done.wait()
    assert seen == [trio_thread] * 100
    assert mailbox.drains <= 101


def test_posting_after_the_trio_run_finished_raises_run_finished() -> None:
    async def grab() -> trio.lowlevel.TrioToken:
        return trio.lowlevel.current_trio_token()

    token = trio.run(grab)
    mailbox = Mailbox(token.run_sync_soon)
    with pytest.raises(trio.RunFinishedError):
        mailbox.post(lambda: None)
