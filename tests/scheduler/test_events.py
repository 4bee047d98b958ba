"""The scheduler's event hook (kills, escalations, failures, timeouts,
unmatchable actions, backpressure), lease ids in statistics, one kind_key
rule and the resource-control exports."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

import lre.scheduler
from lre.errors import DeadlineExceeded, Internal
from lre.proto import re_pb2
from lre.scheduler import (
    Backpressure,
    Completed,
    InfrastructureFailure,
    MemoryExceeded,
    RequestInfo,
    ResourcePolicy,
    SchedulerEvent,
    Stage,
    Usage,
)
from lre.scheduler._kind import kind_key
from lre.scheduler._learner import kind_key as learner_kind_key
from lre.snapshot import EventKind
from tests._support.scheduler import GiB, Harness, MiB, execute_request, start_harness, worker_info


async def events_harness(
    nursery: trio.Nursery, **kwargs: object
) -> tuple[Harness, list[SchedulerEvent]]:
    events: list[SchedulerEvent] = []
    harness = await start_harness(nursery, on_event=events.append, **kwargs)
    return harness, events


async def test_kill_and_escalation_events_carry_peak_worker_and_summary(
    nursery: trio.Nursery,
) -> None:
    policy = ResourcePolicy(cold_memory_bytes=256 * MiB, ladder=(1 * GiB,), max_steps=2)
    harness, events = await events_harness(nursery, resources=policy)
    worker = await harness.add_worker(worker_info(memory=4 * GiB))
    op = harness.scheduler.submit(execute_request(await harness.builder.action("/usr/bin/ld")))
    lease = await worker.next_lease()
    (running,) = harness.scheduler.statistics().workers[0].leases
    assert running.summary == "ld"  # the dashboard's row names it as the events do
    harness.scheduler.report(lease.lease_id, MemoryExceeded(300 * MiB))
    assert [e.kind for e in events] == ["kill", "escalation"]
    kill, escalation = events
    assert kill.peak_rss_bytes == 300 * MiB and kill.worker == "w1" and kill.summary == "ld"
    # events name the action (target, else mnemonic), never the operation UUID
    assert "256 MiB" in kill.message and kill.message.startswith("ld: ")
    assert op.name not in kill.message and op.name not in escalation.message
    assert "1 GiB (ladder step 1)" in escalation.message
    lease = await worker.next_lease()
    harness.scheduler.report(lease.lease_id, MemoryExceeded(2 * GiB))
    await harness.wait_stage(op.name, Stage.COMPLETED)
    assert [e.kind for e in events] == ["kill", "escalation", "kill", "failure"]
    assert events[-1].message.startswith("RESOURCE_EXHAUSTED: ")
    assert events[-1].peak_rss_bytes == 2 * GiB
    # the same with the killed run's result: one failure event, saying why
    again = harness.scheduler.submit(execute_request(await harness.builder.action("/bin/ld")))
    lease = await worker.next_lease()
    killed_run = re_pb2.ActionResult(exit_code=137)
    harness.scheduler.report(
        lease.lease_id,
        MemoryExceeded(3 * GiB, reason="over the hard ceiling", final=True, result=killed_run),
    )
    await harness.wait_stage(again.name, Stage.COMPLETED)
    assert [e.kind for e in events[4:]] == ["kill", "failure"]
    assert events[-1].message == (
        "ld: failed with exit code 137 after 1 kill(s) for its memory, peak 3 GiB (over the "
        "hard ceiling); not run again, the reason is at the end of its stderr"
    )


async def test_timeout_failure_and_backpressure_events(nursery: trio.Nursery) -> None:
    harness, events = await events_harness(nursery, retries=0)
    worker = await harness.add_worker()
    info = RequestInfo(action_mnemonic="CppCompile", target_id="//a:b")
    timed_out = harness.scheduler.submit(
        execute_request(await harness.builder.action()), request_info=info
    )
    lease = await worker.next_lease()
    harness.scheduler.report(lease.lease_id, Backpressure("load too high"))
    assert events[-1].kind == EventKind.BACKPRESSURE
    assert "load too high" in events[-1].message and events[-1].summary == "CppCompile"
    assert events[-1].target == "//a:b" and "CppCompile //a:b" in events[-1].message
    lease = await worker.next_lease()
    usage = Usage(peak_rss_bytes=5 * MiB, cpu_seconds=1.0, wall_seconds=2.0)
    harness.scheduler.report(
        lease.lease_id,
        Completed(re_pb2.ActionResult(), DeadlineExceeded("ran past 60 s"), usage=usage),
    )
    await harness.wait_stage(timed_out.name, Stage.COMPLETED)
    assert events[-1].kind == "timeout" and events[-1].peak_rss_bytes == 5 * MiB
    assert events[-1].message == "DEADLINE_EXCEEDED: ran past 60 s"

    failed = harness.scheduler.submit(execute_request(await harness.builder.action("/bin/cc")))
    lease = await worker.next_lease()
    harness.scheduler.report(lease.lease_id, InfrastructureFailure(Internal("staging broke")))
    await harness.wait_stage(failed.name, Stage.COMPLETED)
    assert events[-1].kind == "failure" and events[-1].worker == "w1"
    assert "staging broke" in events[-1].message and events[-1].summary == "cc"


async def test_unmatchable_action_event_and_no_event_for_success(nursery: trio.Nursery) -> None:
    harness, events = await events_harness(nursery)
    worker = await harness.add_worker(worker_info(cpus=2))
    ok = harness.scheduler.submit(execute_request(await harness.builder.action()))
    worker.complete(await worker.next_lease())
    await harness.wait_stage(ok.name, Stage.COMPLETED)
    assert events == []
    digest = await harness.builder.action(platform={"cpu_count": "64"})
    op = harness.scheduler.submit(execute_request(digest))
    await harness.wait_stage(op.name, Stage.COMPLETED)
    assert [e.kind for e in events] == ["unmatchable"]
    assert (
        events[0].message.startswith("FAILED_PRECONDITION: ")
        and "cpu_count=64" in events[0].message
    )


async def test_a_failing_hook_is_logged_not_raised(nursery: trio.Nursery) -> None:
    def hook(event: SchedulerEvent) -> None:
        raise RuntimeError("hook broke")

    harness = await start_harness(nursery, on_event=hook)
    await harness.add_worker(worker_info(cpus=2))
    op = harness.scheduler.submit(
        execute_request(await harness.builder.action(platform={"cpu_count": "64"}))
    )
    final = await harness.wait_stage(op.name, Stage.COMPLETED)
    assert final.error is not None and "cpu_count=64" in final.error.message


async def test_lease_statistics_name_the_lease(harness: Harness) -> None:
    worker = await harness.add_worker()
    harness.scheduler.submit(execute_request(await harness.builder.action()))
    lease = await worker.next_lease()
    (row,) = harness.scheduler.statistics().workers[0].leases
    assert row.lease_id == lease.lease_id and row.operation_name == lease.operation_name


def test_scheduler_kind_key_is_the_learners_rule() -> None:
    command = re_pb2.Command(arguments=["/usr/bin/gcc", "-O2", "-Iinc", "-c", "a.c", "-o", "a.o"])
    assert kind_key(RequestInfo(), command) == learner_kind_key("", "", command.arguments)
    assert kind_key(RequestInfo(), command).startswith("cmd:gcc:")
    info = RequestInfo(action_mnemonic="CppCompile", target_id="//a:b")
    assert kind_key(info, command) == "bazel:CppCompile://a:b"


def test_resource_control_names_are_exported() -> None:
    for name in (
        "ReservationLearner",
        "ReservationEstimate",
        "SchedulerEvent",
    ):
        assert name in lre.scheduler.__all__
        assert getattr(lre.scheduler, name) is not None


async def test_memory_kills_are_logged_in_human_units_with_mnemonic_and_target(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    policy = ResourcePolicy(cold_memory_bytes=256 * MiB, ladder=(1 * GiB,), max_steps=2)
    harness, _ = await events_harness(nursery, resources=policy)
    worker = await harness.add_worker(worker_info(memory=4 * GiB))
    info = RequestInfo(action_mnemonic="CppCompile", target_id="//big:lib")
    op = harness.scheduler.submit(
        execute_request(await harness.builder.action("/usr/bin/cc")), request_info=info
    )
    caplog.set_level(logging.WARNING, logger="lre.scheduler")
    lease = await worker.next_lease()
    harness.scheduler.report(lease.lease_id, MemoryExceeded(661 * MiB))
    lease = await worker.next_lease()
    harness.scheduler.report(lease.lease_id, MemoryExceeded(1536 * MiB))
    await harness.wait_stage(op.name, Stage.COMPLETED)
    lines = [r.getMessage() for r in caplog.records if "memory ladder" in r.getMessage()]
    assert lines == [
        f"memory ladder: CppCompile //big:lib ({op.name}) killed on worker w1 at 661 MiB "
        "peak RSS, reserving 256 MiB (ladder step 0); requeued at ladder "
        "step 1 reserving 1 GiB (kill 1)",
        f"memory ladder: CppCompile //big:lib ({op.name}) killed on worker w1 at 1.5 GiB "
        "peak RSS, reserving 1 GiB (ladder step 1); not retried: failed with "
        "RESOURCE_EXHAUSTED after 2 kill(s), reservations tried: 256 MiB, 1 GiB",
    ]
    first = next(r for r in caplog.records if "memory ladder" in r.getMessage())
    assert first.kv["step"] == 0 and first.kv["next_step"] == 1  # type: ignore[attr-defined]


async def test_kernel_oom_kill_is_an_oom_event_and_a_log_line(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    harness, events = await events_harness(nursery)
    worker = await harness.add_worker()
    info = RequestInfo(action_mnemonic="Javac", target_id="//app:main")
    op = harness.scheduler.submit(
        execute_request(await harness.builder.action()), request_info=info
    )
    caplog.set_level(logging.WARNING, logger="lre.scheduler")
    lease = await worker.next_lease()
    usage = Usage(peak_rss_bytes=700 * MiB, cpu_seconds=1.0, wall_seconds=2.0)
    killed = re_pb2.ActionResult(exit_code=137)
    harness.scheduler.report(lease.lease_id, Completed(killed, usage=usage, oom_killed=True))
    await harness.wait_stage(op.name, Stage.COMPLETED)
    (oom,) = [e for e in events if e.kind == EventKind.OOM]
    assert oom.summary == "Javac" and oom.worker == "w1" and oom.peak_rss_bytes == 700 * MiB
    assert oom.message.startswith(f"Javac //app:main ({op.name}): killed by the kernel's OOM")
    assert "at 700 MiB peak RSS with a reservation of" in oom.message
    assert oom.message in caplog.text


async def test_worker_health_follows_its_infrastructure_failures(nursery: trio.Nursery) -> None:
    harness, events = await events_harness(nursery, retries=10)
    worker = await harness.add_worker()
    op = harness.scheduler.submit(execute_request(await harness.builder.action()))
    for _ in range(3):
        lease = await worker.next_lease()
        harness.scheduler.report(lease.lease_id, InfrastructureFailure(Internal("disk full")))
    (sick,) = [e for e in events if e.kind == EventKind.WORKER]
    assert sick.healthy is False and sick.worker == "w1"
    assert sick.message == (
        "worker w1: 3 actions in a row failed for lre's reasons; last: INTERNAL: disk full"
    )
    lease = await worker.next_lease()
    harness.scheduler.report(lease.lease_id, Completed(re_pb2.ActionResult()))
    await harness.wait_stage(op.name, Stage.COMPLETED)
    worker_events = [e for e in events if e.kind == EventKind.WORKER]
    assert [e.healthy for e in worker_events] == [False, True]


async def test_a_worker_unregistered_while_running_actions_went_away(
    nursery: trio.Nursery,
) -> None:
    harness, events = await events_harness(nursery)
    worker = await harness.add_worker()
    harness.scheduler.submit(execute_request(await harness.builder.action()))
    await worker.next_lease()
    # The fake worker is back in lease(), which unregistering ends.
    await trio.testing.wait_all_tasks_blocked()
    harness.scheduler.unregister_worker("w1")
    gone = [e for e in events if e.kind == EventKind.WORKER]
    assert [(e.healthy, e.message) for e in gone] == [
        (False, "worker w1 went away while running 1 action(s); they were requeued")
    ]
