"""attach_watcher / detach_watcher: the watcher count both schedulers share."""

from __future__ import annotations

from dataclasses import dataclass

import trio

from lre.scheduler._watch import attach_watcher, detach_watcher


@dataclass
class Record:
    watchers: int = 0
    abandon_token: int = 0
    done: bool = False
    cancels: int = 0

    def cancel(self) -> None:
        self.cancels += 1


def attached() -> Record:
    record = Record()
    attach_watcher(record)
    return record


async def test_without_grace_the_last_watcher_leaving_cancels_at_once() -> None:
    record = attached()
    attach_watcher(record)
    detach_watcher(record, 0, None, record.cancel)
    assert record.cancels == 0  # one watcher is left
    detach_watcher(record, 0, None, record.cancel)
    assert record.cancels == 1


async def test_grace_then_cancel(nursery: trio.Nursery, autojump_clock: trio.abc.Clock) -> None:
    record = attached()
    detach_watcher(record, 5.0, nursery, record.cancel)
    await trio.sleep(4.9)
    assert record.cancels == 0
    await trio.sleep(0.2)
    assert record.cancels == 1


async def test_a_watcher_back_within_grace_keeps_it(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    record = attached()
    detach_watcher(record, 5.0, nursery, record.cancel)
    await trio.sleep(1)
    attach_watcher(record)
    await trio.sleep(10)
    assert record.cancels == 0
    # It leaves again: a new grace period starts from then, and ends in a cancel.
    detach_watcher(record, 5.0, nursery, record.cancel)
    await trio.sleep(5.1)
    assert record.cancels == 1


async def test_a_finished_operation_is_never_cancelled(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    pending = attached()
    detach_watcher(pending, 5.0, nursery, pending.cancel)
    pending.done = True  # finished during the grace period
    await trio.sleep(6)
    finished = attached()
    finished.done = True
    detach_watcher(finished, 0, None, finished.cancel)
    assert pending.cancels == finished.cancels == 0
