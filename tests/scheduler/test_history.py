"""Every operation that ends becomes one ``ActionRecord``: waits, kills, retries."""

from __future__ import annotations

import trio

from lre.errors import Unavailable
from lre.proto import re_pb2
from lre.scheduler import (
    Completed,
    InfrastructureFailure,
    MemoryExceeded,
    RecordBuilder,
    RequestInfo,
    ResourcePolicy,
    Stage,
    Usage,
)
from lre.snapshot import ActionRecord, Phase, Source, WaitReason
from tests._support.scheduler import GiB, MiB, execute_request, start_harness, worker_info


def _info(target: str) -> RequestInfo:
    return RequestInfo(
        tool_name="bazel", tool_invocation_id="inv-1", action_mnemonic="Genrule", target_id=target
    )


async def test_records_say_what_an_action_waited_for_and_how_often_it_ran(
    nursery: trio.Nursery,
) -> None:
    builders: list[RecordBuilder] = []  # built at the end, as the recorder's flush does
    policy = ResourcePolicy(cold_memory_bytes=256 * MiB, ladder=(1 * GiB,), max_steps=3)
    harness = await start_harness(nursery, on_record=builders.append, resources=policy)
    worker = await harness.add_worker(worker_info(cpus=1, memory=4 * GiB))
    first = harness.scheduler.submit(
        execute_request(await harness.builder.action()), request_info=_info("//a:first")
    )
    lease_a = await worker.next_lease()
    second = harness.scheduler.submit(
        execute_request(await harness.builder.action()), request_info=_info("//a:second")
    )
    await harness.wait_stage(second.name, Stage.QUEUED)
    # the queue says what the next action waits for: the one CPU is taken
    with trio.fail_after(5):
        while True:
            (queued,) = harness.scheduler.statistics().queued_next
            if queued.waiting_for:
                break
            await trio.sleep(0.01)
    assert (queued.target, queued.waiting_for) == ("//a:second", WaitReason.CPU)
    # the dashboard's row, as the scheduler hands it out
    assert (queued.operation, queued.summary) == (second.name, "Genrule")
    assert queued.reserved_memory_bytes == 256 * MiB and 0 <= queued.queued_s < 60
    assert harness.scheduler.statistics().queued_by_platform == {"any": 1}  # cpu is no platform
    worker.complete(lease_a)
    lease_b = await worker.next_lease()
    harness.scheduler.report(lease_b.lease_id, MemoryExceeded(300 * MiB))  # a kill
    lease_b = await worker.next_lease()
    harness.scheduler.report(lease_b.lease_id, InfrastructureFailure(Unavailable("lost")))
    lease_b = await worker.next_lease()
    result = re_pb2.ActionResult(exit_code=2)
    harness.scheduler.report(
        lease_b.lease_id,
        Completed(result, usage=Usage(peak_rss_bytes=5 * MiB, cpu_seconds=0.1, wall_seconds=0.2)),
    )
    await harness.wait_stage(second.name, Stage.COMPLETED)
    by_target = {r.target: r for r in (build() for build in builders)}
    a, b = by_target["//a:first"], by_target["//a:second"]
    assert a.source is Source.EXECUTED and a.invocation == "inv-1" and a.tool == "bazel"
    assert a.waited_for == () and a.attempts == 1 and a.exit_code is None  # no stamps sent
    assert a.stamps["queued"] == first.queued_at
    assert b.waited_for == (WaitReason.CPU,)
    assert (b.kills, b.retries, b.attempts) == (1, 1, 3)
    assert b.peak_rss_bytes == 300 * MiB  # the highest over its attempts
    assert len(b.killed_at) == 1 and b.killed_at[0] <= b.at
    assert b.reserved_memory_bytes == 1 * GiB  # the last attempt's, one ladder step up
    assert b.worker == "w1" and b.instance == "main" and not b.error


async def test_a_failing_hook_never_ends_an_operation(nursery: trio.Nursery) -> None:
    def broken(build: RecordBuilder) -> None:
        raise RuntimeError("disk on fire")

    harness = await start_harness(nursery, on_record=broken)
    worker = await harness.add_worker()
    op = harness.scheduler.submit(execute_request(await harness.builder.action()))
    worker.complete(await worker.next_lease())
    done = await harness.wait_stage(op.name, Stage.COMPLETED)
    assert done.error is None and done.result is not None


async def test_a_cancelled_running_action_is_recorded_once_and_forgotten(
    nursery: trio.Nursery,
) -> None:
    records: list[ActionRecord] = []
    harness = await start_harness(nursery, on_record=lambda build: records.append(build()))
    worker = await harness.add_worker()
    op = harness.scheduler.submit(
        execute_request(await harness.builder.action()), request_info=_info("//a:c")
    )
    lease = await worker.next_lease()
    harness.scheduler.cancel(op.name)
    worker.complete(lease)  # the worker reports after the end
    assert [(r.target, r.source, r.error) for r in records] == [
        ("//a:c", Source.EXECUTED, "CANCELLED")
    ]
    assert harness.scheduler._history is not None
    assert harness.scheduler._history._attempts == {}  # nothing kept for it


async def test_a_start_held_by_frozen_actions_says_frozen_and_frozen_runs_are_counted(
    nursery: trio.Nursery,
) -> None:
    """Memory control freezes actions (SIGSTOP) and, while any is frozen, the
    live veto lets nothing new start: the queue must say ``frozen`` (not
    ``host memory``), and the frozen action's record counts the freeze."""
    records: list[ActionRecord] = []
    available = [10 * GiB]
    frozen = [False]
    harness = await start_harness(
        nursery,
        on_record=lambda build: records.append(build()),
        resources=ResourcePolicy(cold_memory_bytes=512 * MiB),
        available_memory=lambda: available[0],
        memory_frozen=lambda: frozen[0],
    )
    worker = await harness.add_worker(worker_info(cpus=8, memory=16 * GiB))
    harness.scheduler.submit(
        execute_request(await harness.builder.action()), request_info=_info("//a:big")
    )
    first = await worker.next_lease()
    frozen[0], available[0] = True, 0  # as PressureMonitor.room_bytes while frozen
    held = harness.scheduler.submit(
        execute_request(await harness.builder.action()), request_info=_info("//a:held")
    )
    with trio.fail_after(10):
        while True:
            queued = harness.scheduler.statistics().queued_next
            if queued and queued[0].waiting_for:
                break
            await trio.sleep(0.01)
    assert queued[0].waiting_for == WaitReason.FROZEN
    frozen[0], available[0] = False, 10 * GiB  # thawed: the periodic re-check starts it
    second = await worker.next_lease(timeout=5)
    usage = Usage(peak_rss_bytes=MiB, cpu_seconds=0.1, wall_seconds=0.2, frozen_seconds=1.5)
    harness.scheduler.report(first.lease_id, Completed(re_pb2.ActionResult(), usage=usage))
    worker.complete(second)
    await harness.wait_stage(held.name, Stage.COMPLETED)
    by_target = {r.target: r for r in records}
    assert by_target["//a:big"].freezes == 1
    assert by_target["//a:held"].freezes == 0
    assert by_target["//a:held"].waited_for == (WaitReason.FROZEN,)


async def test_a_kill_lre_gave_up_after_and_a_cancelled_run_are_recorded_as_such(
    nursery: trio.Nursery,
) -> None:
    """The record of an action killed for good says so, with the kill's reason
    and the killed run's stamps; the record of one cancelled while it ran is
    cancelled (not failed) and keeps when its run started, so it is drawn."""
    builders: list[RecordBuilder] = []
    policy = ResourcePolicy(cold_memory_bytes=256 * MiB, ladder=(1 * GiB,), max_steps=2)
    harness = await start_harness(nursery, on_record=builders.append, resources=policy)
    worker = await harness.add_worker(worker_info(cpus=2, memory=4 * GiB))
    doomed = harness.scheduler.submit(
        execute_request(await harness.builder.action("/bin/hog")), request_info=_info("//a:hog")
    )
    lease = await worker.next_lease()
    harness.scheduler.report(lease.lease_id, MemoryExceeded(300 * MiB, reason="memory was short"))
    lease = await worker.next_lease()
    killed_run = re_pb2.ActionResult(exit_code=137)
    for name, at in (("execution_start", 100.0), ("execution_completed", 101.5)):
        getattr(killed_run.execution_metadata, f"{name}_timestamp").FromSeconds(int(at))
    outcome = MemoryExceeded(2 * GiB, reason="over the hard ceiling", final=True, result=killed_run)
    harness.scheduler.report(lease.lease_id, outcome)
    await harness.wait_stage(doomed.name, Stage.COMPLETED)
    stopped = harness.scheduler.submit(
        execute_request(await harness.builder.action("/bin/sleep")), request_info=_info("//a:slow")
    )
    await worker.next_lease()
    harness.scheduler.cancel(stopped.name)
    await harness.wait_stage(stopped.name, Stage.COMPLETED)
    by_target = {r.target: r for r in (build() for build in builders)}
    hog, slow = by_target["//a:hog"], by_target["//a:slow"]
    assert (hog.kills, hog.kill_ended, hog.memory_retries) == (2, True, 1)
    assert hog.kill_reason == "over the hard ceiling" and hog.exit_code == 137
    assert hog.phase_seconds(Phase.RUNNING) == 1.0  # the killed run, drawn with its time
    assert len(hog.killed_at) == 2 and hog.failed and not hog.cancelled
    assert slow.cancelled and not slow.failed and slow.source is Source.EXECUTED
    assert slow.stamps["worker_start"] >= slow.submitted_at
    again = ActionRecord.from_json(hog.to_json())
    assert (again.kill_reason, again.kill_ended) == ("over the hard ceiling", True)
