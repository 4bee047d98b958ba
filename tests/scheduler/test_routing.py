"""Routing (``lre.scheduler._routing``): a wrapping scheduler's route takes an
operation away or lets it run here, and the operation has one record, in
the scheduler it was submitted to."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from lre.errors import Cancelled, FailedPrecondition
from lre.proto import re_pb2
from lre.scheduler import OperationSnapshot, Stage
from lre.scheduler._routing import RoutedOperation
from tests._support.scheduler import Harness, execute_request


async def follow(harness: Harness, name: str) -> list[OperationSnapshot]:
    with trio.fail_after(5):
        async with harness.scheduler.watch(name) as updates:
            return [snapshot async for snapshot in updates]


async def test_a_route_that_returns_lets_the_operation_run_here(harness: Harness) -> None:
    worker = await harness.add_worker()
    digest = await harness.builder.action()
    routed: list[str] = []

    async def route(operation: RoutedOperation) -> None:
        routed.append(operation.name)

    submitted = harness.scheduler.submit(execute_request(digest), route=route)
    lease = await worker.next_lease()
    assert routed == [submitted.name] == [lease.operation_name]
    worker.complete(lease)
    final = (await follow(harness, submitted.name))[-1]
    assert final.done and final.result is not None
    assert not harness.scheduler.is_routed_away(submitted.name)
    assert harness.scheduler.statistics().completions["success"] == 1


async def test_an_operation_taken_away_has_one_record_outside_the_local_counts(
    harness: Harness,
) -> None:
    worker = await harness.add_worker()
    digest = await harness.builder.action()
    release = trio.Event()

    async def route(operation: RoutedOperation) -> None:
        operation.take_away("run elsewhere")
        operation.set_stage(Stage.EXECUTING)
        await release.wait()
        operation.finish(result=re_pb2.ActionResult(exit_code=7))

    submitted = harness.scheduler.submit(execute_request(digest), route=route)
    snapshot = await harness.wait_stage(submitted.name, Stage.EXECUTING)
    assert snapshot.message == "run elsewhere" and not snapshot.done
    assert harness.scheduler.is_routed_away(submitted.name)
    assert [op.name for op in harness.scheduler.list_operations()] == [submitted.name]
    statistics = harness.scheduler.statistics()
    assert sum(statistics.by_stage.values()) == 0  # not in the local stage counts
    release.set()
    final = (await follow(harness, submitted.name))[-1]
    assert final.done and final.result is not None and final.result.exit_code == 7
    assert final.message == "run elsewhere"
    assert worker.no_lease_pending()
    assert harness.scheduler.statistics().completions == {}


async def test_cancelling_an_operation_taken_away_cancels_its_route(harness: Harness) -> None:
    digest = await harness.builder.action()
    cancelled = trio.Event()

    async def route(operation: RoutedOperation) -> None:
        operation.take_away("run elsewhere")
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    submitted = harness.scheduler.submit(execute_request(digest), route=route)
    await trio.testing.wait_all_tasks_blocked()
    harness.scheduler.cancel(submitted.name)
    with trio.fail_after(5):
        await cancelled.wait()
    final = harness.scheduler.get_operation(submitted.name)
    assert isinstance(final.error, Cancelled)


async def test_an_operation_brought_back_runs_here(harness: Harness) -> None:
    worker = await harness.add_worker()
    digest = await harness.builder.action()

    async def route(operation: RoutedOperation) -> None:
        operation.take_away("run elsewhere")
        operation.set_stage(Stage.QUEUED)
        await trio.lowlevel.checkpoint()
        operation.bring_back()

    submitted = harness.scheduler.submit(execute_request(digest), route=route)
    lease = await worker.next_lease()
    assert lease.operation_name == submitted.name
    snapshot = harness.scheduler.get_operation(submitted.name)
    assert snapshot.stage is Stage.EXECUTING and snapshot.message == ""
    assert not harness.scheduler.is_routed_away(submitted.name)
    assert harness.scheduler.statistics().by_stage["EXECUTING"] == 1
    worker.complete(lease)
    assert (await follow(harness, submitted.name))[-1].result is not None


async def test_a_route_that_leaves_its_operation_unfinished_ends_it_internal(
    harness: Harness,
) -> None:
    digest = await harness.builder.action()

    async def route(operation: RoutedOperation) -> None:
        operation.take_away("run elsewhere")

    submitted = harness.scheduler.submit(execute_request(digest), route=route)
    final = (await follow(harness, submitted.name))[-1]
    assert final.error is not None and final.error.code.name == "INTERNAL"
    assert "route ended without an outcome" in final.error.message


@pytest.mark.parametrize("away", [True, False])
async def test_a_route_that_raises_ends_its_operation_with_the_error(
    harness: Harness, away: bool
) -> None:
    digest = await harness.builder.action()

    async def route(operation: RoutedOperation) -> None:
        if away:
            operation.take_away("run elsewhere")
        raise FailedPrecondition("nowhere to run it")

    submitted = harness.scheduler.submit(execute_request(digest), route=route)
    final = (await follow(harness, submitted.name))[-1]
    assert isinstance(final.error, FailedPrecondition)
    assert final.error.message == "nowhere to run it"


async def test_identical_submissions_while_routing_join_but_not_once_away(
    harness: Harness,
) -> None:
    digest = await harness.builder.action()
    away = trio.Event()
    release = trio.Event()
    routes = 0

    async def route(operation: RoutedOperation) -> None:
        nonlocal routes
        routes += 1
        await away.wait()
        operation.take_away("run elsewhere")
        await release.wait()
        operation.finish(result=re_pb2.ActionResult())

    first = harness.scheduler.submit(execute_request(digest), route=route)
    joined = harness.scheduler.submit(execute_request(digest), route=route)
    assert joined.name == first.name  # still routing: one operation
    away.set()
    await trio.testing.wait_all_tasks_blocked()
    separate = harness.scheduler.submit(execute_request(digest), route=route)
    assert separate.name != first.name  # taken away: no longer joined
    release.set()
    assert (await follow(harness, first.name))[-1].done
    assert (await follow(harness, separate.name))[-1].done
    assert routes == 2
