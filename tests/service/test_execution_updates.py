"""The Operations an Execute stream sends: first at once, done at once,
intermediate stages only once they last (virtual time, so exact)."""

from __future__ import annotations

import trio
import trio.testing

from lre.proto import operations_pb2, re_pb2
from lre.scheduler import RequestInfo
from lre.service.execution import STAGE_SETTLE_S, execute_updates
from tests._support.scheduler import execute_request, start_harness


def stage_of(operation: operations_pb2.Operation) -> int:
    metadata = re_pb2.ExecuteOperationMetadata()
    assert operation.metadata.Unpack(metadata)
    return int(metadata.stage)


async def test_an_action_finished_within_the_settle_time_costs_two_messages(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    harness = await start_harness(nursery)
    worker = await harness.add_worker()

    async def complete_at_once() -> None:
        worker.complete(await worker.next_lease())

    nursery.start_soon(complete_at_once)
    request = execute_request(await harness.builder.action())
    ops = [op async for op in execute_updates(harness.scheduler, request, RequestInfo())]
    stages = [stage_of(op) for op in ops]
    assert stages == [re_pb2.ExecutionStage.CACHE_CHECK, re_pb2.ExecutionStage.COMPLETED]
    assert ops[-1].done and not ops[0].done and ops[0].name == ops[-1].name


async def test_a_stage_that_lasts_is_streamed_after_the_settle_time(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    harness = await start_harness(nursery)
    worker = await harness.add_worker()
    request = execute_request(await harness.builder.action())
    seen: list[tuple[int, float]] = []

    async def run_for_a_second() -> None:
        lease = await worker.next_lease()
        await trio.sleep(1.0)
        worker.complete(lease)

    nursery.start_soon(run_for_a_second)
    start = trio.current_time()
    async for op in execute_updates(harness.scheduler, request, RequestInfo()):
        seen.append((stage_of(op), trio.current_time() - start))
    assert [stage for stage, _ in seen] == [
        re_pb2.ExecutionStage.CACHE_CHECK,
        re_pb2.ExecutionStage.EXECUTING,
        re_pb2.ExecutionStage.COMPLETED,
    ]
    assert seen[0][1] == 0
    assert abs(seen[1][1] - STAGE_SETTLE_S) < 1e-6  # EXECUTING once it lasted
    assert abs(seen[2][1] - 1.0) < 1e-6  # done at once


async def test_progress_updates_resend_the_operation_built_for_the_unchanged_state(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """A progress tick changes nothing, so a held stream sends the message it
    already built (thousands of queued streams, one message each per tick)."""
    harness = await start_harness(nursery)  # progress every 10 s
    worker = await harness.add_worker()
    request = execute_request(await harness.builder.action())

    async def run_for_35_seconds() -> None:
        lease = await worker.next_lease()
        await trio.sleep(35)
        worker.complete(lease)

    nursery.start_soon(run_for_35_seconds)
    ops = [op async for op in execute_updates(harness.scheduler, request, RequestInfo())]
    executing = [op for op in ops if stage_of(op) == re_pb2.ExecutionStage.EXECUTING]
    assert len(executing) >= 4  # the stage itself, then one per 10 s tick
    assert all(op is executing[0] for op in executing)
    assert ops[-1].done and stage_of(ops[-1]) == re_pb2.ExecutionStage.COMPLETED


async def test_stages_shorter_than_the_settle_time_are_not_streamed(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """Queued and executing for a while each, but never for the settle time:
    the client hears of the operation and of its end, nothing in between."""
    harness = await start_harness(nursery)
    request = execute_request(await harness.builder.action())
    stages: list[int] = []

    async def late_worker_runs_briefly() -> None:
        await trio.sleep(STAGE_SETTLE_S * 0.8)  # the action waits in the queue
        worker = await harness.add_worker()
        lease = await worker.next_lease()
        await trio.sleep(STAGE_SETTLE_S * 0.8)
        worker.complete(lease)

    nursery.start_soon(late_worker_runs_briefly)
    async for op in execute_updates(harness.scheduler, request, RequestInfo()):
        stages.append(stage_of(op))
    assert stages == [re_pb2.ExecutionStage.CACHE_CHECK, re_pb2.ExecutionStage.COMPLETED]
