"""Operation lifecycle: stages, dedup, cancellation, re-attach, expiry, cache."""

from __future__ import annotations

import pytest
import trio

from lre.digest import Digest
from lre.errors import Cancelled, NotFound
from lre.proto import re_pb2
from lre.scheduler import Completed, OperationSnapshot, Stage
from tests._support.scheduler import Harness, execute_request, start_harness


async def collect(harness: Harness, name: str, into: list[OperationSnapshot]) -> None:
    async with harness.scheduler.watch(name) as updates:
        async for snapshot in updates:
            into.append(snapshot)


async def test_stages_in_order_and_final_result(harness: Harness) -> None:
    worker = await harness.add_worker()
    digest = await harness.builder.action("/bin/echo", "hi")
    first = harness.scheduler.submit(execute_request(digest))
    assert first.stage is Stage.CACHE_CHECK and not first.done
    assert first.name.startswith("main/operations/")
    seen: list[OperationSnapshot] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(collect, harness, first.name, seen)
        lease = await worker.next_lease()
        await harness.wait_stage(first.name, Stage.EXECUTING)
        await trio.sleep(0.01)
        assert lease.operation_name == first.name
        assert list(lease.command.arguments) == ["/bin/echo", "hi"]
        assert lease.reservation.millicpus == 1000  # the property_modifier default
        assert lease.attempt == 1 and lease.timeout_s == 1200.0
        worker.complete(lease, exit_code=3)
    stages = [s.stage for s in seen]
    assert stages == sorted(stages)
    assert stages[0] is Stage.CACHE_CHECK and stages[-1] is Stage.COMPLETED
    assert Stage.EXECUTING in stages
    final = seen[-1]
    assert final.done and final.error is None and final.result is not None
    assert final.result.exit_code == 3
    stats = harness.scheduler.statistics()
    assert stats.completions["nonzero_exit"] == 1
    assert stats.workers[0].reserved.millicpus == 0


async def test_identical_inflight_actions_share_one_run(harness: Harness) -> None:
    worker = await harness.add_worker()
    digest = await harness.builder.action("/bin/cc", "-c", "a.c")
    a = harness.scheduler.submit(execute_request(digest))
    b = harness.scheduler.submit(execute_request(digest))
    assert a.name == b.name
    seen_a: list[OperationSnapshot] = []
    seen_b: list[OperationSnapshot] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(collect, harness, a.name, seen_a)
        nursery.start_soon(collect, harness, b.name, seen_b)
        lease = await worker.next_lease()
        await trio.sleep(0.01)
        worker.complete(lease)
    assert seen_a[-1].done and seen_b[-1].done
    assert seen_a[-1].result == seen_b[-1].result
    assert worker.no_lease_pending()
    # skip_cache_lookup never joins another operation
    c = harness.scheduler.submit(execute_request(digest, skip_cache=True))
    d = harness.scheduler.submit(execute_request(digest, skip_cache=True))
    assert c.name != d.name
    assert harness.scheduler.statistics().dedup_hits == 1


async def test_do_not_cache_actions_are_not_merged(harness: Harness) -> None:
    await harness.add_worker()
    digest = await harness.builder.action("/bin/date", do_not_cache=True)
    a = harness.scheduler.submit(execute_request(digest))
    await harness.wait_stage(a.name, Stage.QUEUED)
    b = harness.scheduler.submit(execute_request(digest))
    assert a.name != b.name


async def test_last_watcher_leaving_cancels_the_lease(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    harness = await start_harness(nursery, detach_grace_s=2.0)
    worker = await harness.add_worker()
    digest = await harness.builder.action("/bin/sleep", "100")
    op = harness.scheduler.submit(execute_request(digest))
    async with harness.scheduler.watch(op.name) as updates:
        async for snapshot in updates:
            if snapshot.stage is Stage.EXECUTING:
                break
    lease = await worker.next_lease()
    assert not lease.cancelled
    cancelled = trio.Event()
    lease.on_cancel(cancelled.set)
    with trio.fail_after(10):
        await cancelled.wait()
    snapshot = harness.scheduler.get_operation(op.name)
    assert snapshot.done and isinstance(snapshot.error, Cancelled)
    # The reservation stays until the worker reports.
    assert harness.scheduler.statistics().workers[0].reserved.millicpus == 1000
    assert harness.scheduler.report(lease.lease_id, Completed(re_pb2.ActionResult()))
    assert harness.scheduler.statistics().workers[0].reserved.millicpus == 0
    assert harness.scheduler.get_operation(op.name).error is snapshot.error


async def test_reattach_within_grace_keeps_running_and_expiry_gives_not_found(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    harness = await start_harness(nursery, detach_grace_s=5.0, retain=60.0)
    worker = await harness.add_worker()
    digest = await harness.builder.action("/bin/true")
    op = harness.scheduler.submit(execute_request(digest))
    async with harness.scheduler.watch(op.name) as updates:
        async for snapshot in updates:
            if snapshot.stage is Stage.EXECUTING:
                break
    lease = await worker.next_lease()
    await trio.sleep(3)  # client reconnects (WaitExecution) within the grace
    seen: list[OperationSnapshot] = []
    async with trio.open_nursery() as inner:
        inner.start_soon(collect, harness, op.name, seen)
        await trio.sleep(30)  # progress updates arrive meanwhile
        assert not lease.cancelled
        worker.complete(lease)
    assert seen[-1].done and seen[-1].error is None
    progress = [s for s in seen if s.stage is Stage.EXECUTING]
    assert len(progress) >= 3  # first state, then one per 10 s progress interval
    await trio.sleep(59)
    assert harness.scheduler.get_operation(op.name).done
    await trio.sleep(2)
    with pytest.raises(NotFound, match="finished more than 60 s ago"):
        harness.scheduler.watch(op.name)


async def test_cancel_operation_and_delete(harness: Harness) -> None:
    worker = await harness.add_worker()
    op = harness.scheduler.submit(execute_request(await harness.builder.action("/bin/sleep")))
    lease = await worker.next_lease()
    harness.scheduler.cancel(op.name)
    assert lease.cancelled
    assert isinstance(harness.scheduler.get_operation(op.name).error, Cancelled)
    harness.scheduler.delete(op.name)
    with pytest.raises(NotFound):
        harness.scheduler.get_operation(op.name)
    with pytest.raises(NotFound, match="not an lre operation name"):
        harness.scheduler.get_operation("bogus")


async def test_cache_hit_completes_without_running(nursery: trio.Nursery) -> None:
    cached = re_pb2.ActionResult(exit_code=0, stdout_raw=b"from cache")

    class Cache:
        def __init__(self) -> None:
            self.asked: list[Digest] = []

        async def get_result(self, digest: Digest) -> re_pb2.ActionResult | None:
            self.asked.append(digest)
            return cached if len(self.asked) == 1 else None

    cache = Cache()
    harness = await start_harness(nursery, action_cache=cache)
    worker = await harness.add_worker()
    digest = await harness.builder.action("/bin/cc")
    op = harness.scheduler.submit(execute_request(digest))
    final = await harness.wait_stage(op.name, Stage.COMPLETED)
    assert final.cached_result and final.result == cached
    assert cache.asked == [digest]
    skipped = harness.scheduler.submit(execute_request(digest, skip_cache=True))
    await worker.next_lease()
    assert cache.asked == [digest]
    assert not harness.scheduler.get_operation(skipped.name).cached_result
    assert harness.scheduler.statistics().cache_hits == 1


async def test_operation_names_with_slashes_in_instance(harness: Harness) -> None:
    await harness.add_worker()
    digest = await harness.builder.action()
    op = harness.scheduler.submit(execute_request(digest, instance="a/operations/b"))
    assert op.name.startswith("a/operations/b/operations/")
    assert harness.scheduler.get_operation(op.name).instance_name == "a/operations/b"
    listed = harness.scheduler.list_operations("a/operations/b")
    assert [s.name for s in listed] == [op.name]
    assert harness.scheduler.list_operations("main") == []
