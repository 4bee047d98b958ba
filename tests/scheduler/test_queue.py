"""Queue order, drain, retries, backpressure and the memory ladder."""

from __future__ import annotations

import pytest
import trio

from lre.errors import Internal, ResourceExhausted
from lre.proto import re_pb2
from lre.scheduler import (
    Backpressure,
    InfrastructureFailure,
    MemoryExceeded,
    ResourcePolicy,
    Stage,
    Usage,
)
from tests._support.scheduler import GiB, Harness, MiB, execute_request, start_harness, worker_info


async def test_lower_priority_value_runs_sooner_fifo_within(harness: Harness) -> None:
    worker = await harness.add_worker(worker_info(max_inflight=1))
    blocker = harness.scheduler.submit(execute_request(await harness.builder.action()))
    first = await worker.next_lease()
    assert first.operation_name == blocker.name
    names = {}
    for label, priority in [("late", 5), ("a", 0), ("urgent", -3), ("b", 0), ("later", 5)]:
        op = harness.scheduler.submit(
            execute_request(await harness.builder.action("/bin/" + label), priority=priority)
        )
        await harness.wait_stage(op.name, Stage.QUEUED)
        names[op.name] = label
    assert worker.no_lease_pending()
    order = []
    worker.complete(first)
    for _ in range(5):
        lease = await worker.next_lease()
        order.append(names[lease.operation_name])
        assert worker.no_lease_pending()  # max_inflight 1
        worker.complete(lease)
    assert order == ["urgent", "a", "b", "late", "later"]


async def test_draining_worker_takes_nothing_new(harness: Harness) -> None:
    worker = await harness.add_worker()
    running = harness.scheduler.submit(execute_request(await harness.builder.action()))
    lease = await worker.next_lease()
    harness.scheduler.set_draining(worker.info.name, True)
    queued = harness.scheduler.submit(execute_request(await harness.builder.action()))
    await harness.wait_stage(queued.name, Stage.QUEUED)
    await trio.sleep(0.05)
    assert worker.no_lease_pending()
    worker.complete(lease)  # what it held finishes normally
    assert harness.scheduler.get_operation(running.name).done
    assert harness.scheduler.statistics().workers[0].draining
    harness.scheduler.set_draining(worker.info.name, False)
    assert (await worker.next_lease()).operation_name == queued.name


async def test_infrastructure_failures_retry_then_fail(harness: Harness) -> None:
    worker = await harness.add_worker()
    op = harness.scheduler.submit(execute_request(await harness.builder.action()))
    for attempt in (1, 2, 3):  # max_job_retries=2: three attempts in all
        lease = await worker.next_lease()
        assert lease.attempt == attempt
        harness.scheduler.report(lease.lease_id, InfrastructureFailure(Internal("disk gone")))
    final = await harness.wait_stage(op.name, Stage.COMPLETED)
    assert isinstance(final.error, Internal)
    assert "gave up after 3 attempt(s)" in final.message
    assert harness.scheduler.statistics().retries == 2


async def test_backpressure_requeues_without_counting_an_attempt(harness: Harness) -> None:
    worker = await harness.add_worker()
    harness.scheduler.submit(execute_request(await harness.builder.action()))
    for _ in range(4):
        lease = await worker.next_lease()
        assert lease.attempt == 1
        assert harness.scheduler.report(lease.lease_id, Backpressure("precondition"))
        assert not harness.scheduler.report(lease.lease_id, Backpressure())  # once only
    assert (await worker.next_lease()).attempt == 1
    assert harness.scheduler.statistics().backpressure_requeues == 4


async def test_memory_ladder_steps_up_then_whole_worker_then_fails(
    nursery: trio.Nursery,
) -> None:
    policy = ResourcePolicy(cold_memory_bytes=256 * MiB, ladder=(1 * GiB, 2 * GiB), max_steps=4)
    harness = await start_harness(nursery, resources=policy)
    worker = await harness.add_worker(worker_info(memory=4 * GiB))
    op = harness.scheduler.submit(execute_request(await harness.builder.action("/bin/big")))
    lease = await worker.next_lease()
    assert (lease.ladder_step, lease.reservation.memory_bytes) == (0, 256 * MiB)
    harness.scheduler.report(lease.lease_id, MemoryExceeded(310 * MiB))
    lease = await worker.next_lease()
    assert (lease.ladder_step, lease.reservation.memory_bytes, lease.attempt) == (1, 1 * GiB, 1)
    # a kill far past the step skips the steps below the peak
    harness.scheduler.report(lease.lease_id, MemoryExceeded(int(2.5 * GiB)))
    lease = await worker.next_lease()
    assert lease.exclusive and lease.ladder_step == 3
    assert lease.reservation.memory_bytes == 4 * GiB and lease.reservation.millicpus == 4000
    # nothing else may run beside an exclusive lease
    harness.scheduler.submit(execute_request(await harness.builder.action("/bin/small")))
    await trio.sleep(0.05)
    assert worker.no_lease_pending()
    harness.scheduler.report(lease.lease_id, MemoryExceeded(5 * GiB))
    lease = await worker.next_lease()  # requeued at its old place: before the small one
    assert lease.exclusive and list(lease.command.arguments) == ["/bin/big"]
    harness.scheduler.report(lease.lease_id, MemoryExceeded(6 * GiB))
    small = await worker.next_lease()
    assert list(small.command.arguments) == ["/bin/small"]
    final = await harness.wait_stage(op.name, Stage.COMPLETED)
    assert isinstance(final.error, ResourceExhausted)
    assert final.error.message.endswith(
        "was killed 4 time(s) while memory was short or over the hard ceiling; "
        "peak RSS 6 GiB; "
        "steps tried: 256 MiB, 1 GiB, whole worker, whole worker"
    )
    assert harness.scheduler.statistics().ladder_kills == 4


async def test_the_last_kill_the_ladder_allows_ends_with_the_workers_result_not_an_error(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    """The lease that ``max_steps`` allows no kill after says so
    (``last_chance``); a kill of it that carries the killed run's result ends
    the operation with that result, as the action's own failure (status OK,
    exit code 137), which no client retries. A final kill over the ceiling
    ends it at once the same way."""
    policy = ResourcePolicy(cold_memory_bytes=256 * MiB, ladder=(1 * GiB,), max_steps=2)
    harness = await start_harness(nursery, resources=policy)
    worker = await harness.add_worker(worker_info(memory=4 * GiB))
    op = harness.scheduler.submit(execute_request(await harness.builder.action("/bin/big")))
    lease = await worker.next_lease()
    assert (lease.memory_kills, lease.last_chance) == (0, False)
    harness.scheduler.report(lease.lease_id, MemoryExceeded(310 * MiB))
    lease = await worker.next_lease()
    assert (lease.memory_kills, lease.last_chance) == (1, True)
    killed_run = re_pb2.ActionResult(exit_code=137)
    harness.scheduler.report(lease.lease_id, MemoryExceeded(1536 * MiB, result=killed_run))
    final = await harness.wait_stage(op.name, Stage.COMPLETED)
    assert final.error is None and final.result is not None
    assert final.result.exit_code == 137
    assert final.message.startswith("lre memory control: killed at 310 MiB RSS")
    assert final.message.endswith(
        "not run again after 2 kill(s); lre's explanation ends the action's stderr"
    )
    assert "retried, ran at" not in final.message
    (line,) = [r.getMessage() for r in caplog.records if "not retried" in r.getMessage()]
    assert "failed with exit code 137 (the killed run's result) after 2 kill(s)" in line
    assert harness.scheduler.statistics().completions["nonzero_exit"] == 1

    over = harness.scheduler.submit(execute_request(await harness.builder.action("/bin/huge")))
    lease = await worker.next_lease()
    assert lease.last_chance is False
    harness.scheduler.report(lease.lease_id, MemoryExceeded(5 * GiB, final=True, result=killed_run))
    ended = await harness.wait_stage(over.name, Stage.COMPLETED)
    assert ended.error is None and ended.result is not None and ended.result.exit_code == 137
    assert worker.no_lease_pending()


async def test_learned_reservations_are_used_and_recorded(nursery: trio.Nursery) -> None:
    class Advisor:
        def __init__(self) -> None:
            self.recorded: list[tuple[str, int, int, int]] = []

        def lookup(self, key: str) -> tuple[int, int, int] | None:
            return (2500, 700 * MiB, 0) if "bazel:CppCompile:" in key else None

        def record(self, key: str, peak: int, average: int, step: int) -> None:
            self.recorded.append((key, peak, average, step))

    advisor = Advisor()
    policy = ResourcePolicy(cold_memory_bytes=100 * MiB, ladder=(1 * GiB,))
    harness = await start_harness(nursery, resources=policy, advisor=advisor)
    worker = await harness.add_worker()
    from lre.scheduler import Completed, RequestInfo

    info = RequestInfo(action_mnemonic="CppCompile", target_id="//a:b")
    harness.scheduler.submit(execute_request(await harness.builder.action()), request_info=info)
    lease = await worker.next_lease()
    assert lease.kind_key == "[main] bazel:CppCompile://a:b"
    assert (lease.reservation.millicpus, lease.reservation.memory_bytes) == (2500, 700 * MiB)
    usage = Usage(peak_rss_bytes=300 * MiB, cpu_seconds=3.0, wall_seconds=2.0)
    harness.scheduler.report(lease.lease_id, Completed(re_pb2.ActionResult(), usage=usage))
    assert advisor.recorded == [("[main] bazel:CppCompile://a:b", 300 * MiB, 1500, 0)]
    harness.scheduler.submit(execute_request(await harness.builder.action("gcc", "-c", "x.c")))
    lease = await worker.next_lease()
    assert lease.kind_key.startswith("[main] cmd:gcc:")
    assert (lease.reservation.millicpus, lease.reservation.memory_bytes) == (1000, 100 * MiB)


async def test_memory_budget_bounds_what_runs_together(nursery: trio.Nursery) -> None:
    policy = ResourcePolicy(cold_memory_bytes=300 * MiB, memory_budget_bytes=1 * GiB)
    harness = await start_harness(nursery, resources=policy)
    worker = await harness.add_worker(worker_info(cpus=16))
    for _ in range(5):
        harness.scheduler.submit(execute_request(await harness.builder.action()))
    leases = [await worker.next_lease() for _ in range(3)]
    await trio.sleep(0.05)
    assert worker.no_lease_pending()  # a fourth 300 MiB would pass 1 GiB
    assert harness.scheduler.statistics().memory_reserved_bytes == 900 * MiB
    worker.complete(leases[0])
    await worker.next_lease()


async def test_live_memory_veto_holds_starts_while_something_runs(nursery: trio.Nursery) -> None:
    available = [10 * GiB]
    policy = ResourcePolicy(cold_memory_bytes=512 * MiB)
    harness = await start_harness(nursery, resources=policy, available_memory=lambda: available[0])
    worker = await harness.add_worker(worker_info(cpus=8, memory=16 * GiB))
    harness.scheduler.submit(execute_request(await harness.builder.action()))
    first = await worker.next_lease()
    available[0] = 100 * MiB
    harness.scheduler.submit(execute_request(await harness.builder.action()))
    await trio.sleep(1.2)
    assert worker.no_lease_pending()
    available[0] = 4 * GiB  # the periodic re-check lets it start
    await worker.next_lease(timeout=2)
    worker.complete(first)


async def test_unregistered_worker_leases_are_requeued(harness: Harness) -> None:
    worker = await harness.add_worker(worker_info("w1"))
    op = harness.scheduler.submit(execute_request(await harness.builder.action()))
    lease = await worker.next_lease()
    other = await harness.add_worker(worker_info("w2"))
    harness.scheduler.unregister_worker("w1")
    assert lease.cancelled
    assert not harness.scheduler.report(lease.lease_id, Backpressure())
    again = await other.next_lease()
    assert again.operation_name == op.name and again.attempt == 2


def test_an_extra_amount_a_worker_offers_is_held_like_cpu() -> None:
    from types import MappingProxyType

    from lre.digest import Digest, DigestFunction
    from lre.scheduler._matching import Requirements
    from lre.scheduler._model import ActionKey, RequestInfo, Reservation, WorkerInfo
    from lre.scheduler._queue import RunQueue
    from lre.scheduler._records import OperationState, WorkerState

    one_gpu = Reservation(1000, 64 * MiB, MappingProxyType({"gpu": 1}))
    queue = RunQueue(ResourcePolicy(), None)
    for i in range(2):
        key = ActionKey("", DigestFunction.SHA256, Digest(f"{i:064x}", 1))
        op = OperationState(f"op{i}", key, i, re_pb2.ExecuteRequest(), RequestInfo())
        op.requirements = Requirements((), (), one_gpu)
        op.reservation = one_gpu
        queue.push(op)
    offers = Reservation(4000, 8 * GiB, MappingProxyType({"gpu": 1}))
    state = WorkerState(WorkerInfo("w", MappingProxyType({}), offers))
    taken = queue.take(state, 0, 0)
    assert taken is not None and taken[0].name == "op0"
    state.reserved = state.reserved + taken[1]
    # Three CPUs are free, the one GPU is not.
    assert queue.take(state, taken[1].memory_bytes, 1) is None
    state.reserved = state.reserved - taken[1]
    again = queue.take(state, 0, 0)
    assert again is not None and again[0].name == "op1"
