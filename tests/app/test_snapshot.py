"""ProcessSnapshot assembly from the real scheduler, JSON round trip, events, health."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

import pytest
import trio

from lre.app._events import EventLog
from lre.app._health import HealthBoard, free_space_check
from lre.app._metrics import platform_key_set
from lre.app._snapshot import SnapshotAssembler
from lre.scheduler import (
    LeaseStatistics,
    RegisteredWorkerStatistics,
    Reservation,
    SchedulerStatistics,
)
from lre.snapshot import EventKind, JobserverTokens, ProcessSnapshot, action_summary
from tests.tui._load import run, start_load, submit
from tests.tui._sample import sample_snapshot


def test_json_round_trip_is_exact() -> None:
    snapshot = sample_snapshot()
    text = snapshot.dumps()
    assert json.loads(text)["schema"] == 1
    again = ProcessSnapshot.loads(text)
    assert again == snapshot
    assert again.events[0].kind is EventKind.KILL
    assert again.cache_hit_ratio == pytest.approx(310 / 1260)
    assert again.effective_memory_capacity_bytes == 12 << 30


def test_from_json_names_what_is_wrong() -> None:
    data = sample_snapshot().to_json()
    with pytest.raises(ValueError, match="schema: expected 1, got 7"):
        ProcessSnapshot.from_json({**data, "schema": 7})
    del data["address"]
    with pytest.raises(ValueError, match="'address' is missing"):
        ProcessSnapshot.from_json(data)
    data = sample_snapshot().to_json()
    del data["inflight"][0]["worker"]
    with pytest.raises(ValueError, match=r"InflightAction\.worker"):
        ProcessSnapshot.from_json(data)
    with pytest.raises(ValueError, match="must be a JSON object"):
        ProcessSnapshot.loads("[1]")
    # a newer server may add fields: they are ignored
    data = sample_snapshot().to_json()
    data["future_field"] = {"x": 1}
    data["stores"][0]["future"] = 2
    assert ProcessSnapshot.from_json(data) == sample_snapshot()


async def test_assembled_from_real_scheduler(nursery: trio.Nursery) -> None:
    load = await start_load(nursery)
    await submit(load, 12)
    await run(load, 5, hold=3)
    await trio.sleep(0.05)
    snapshot = load.assembler()
    assert snapshot.submitted == 12
    assert snapshot.completions == {"success": 4, "nonzero_exit": 1}
    assert snapshot.by_stage == {"CACHE_CHECK": 0, "QUEUED": 4, "EXECUTING": 3}
    assert snapshot.cache_hits == 0 and snapshot.cache_misses == 12
    assert sum(snapshot.queued_by_platform.values()) == 4
    assert {platform_key_set(label) for label in snapshot.queued_by_platform} == {"OSFamily"}
    assert snapshot.running == 3
    held = {lease.operation_name: lease for lease in load.held}
    for row in snapshot.inflight:
        lease = held[row.operation]
        assert row.summary == lease.request_info.action_mnemonic
        assert row.target == lease.request_info.target_id
        assert row.worker == "local"
        assert row.reserved_millicpus == lease.reservation.millicpus
        assert row.attempt == 1 and row.ladder_step == 0
        assert 0.04 <= row.elapsed_s < 10
        assert row.rss_bytes is None  # no sampler in this process
    elapsed = [row.elapsed_s for row in snapshot.inflight]
    assert elapsed == sorted(elapsed, reverse=True)
    (worker,) = snapshot.workers
    assert worker.inflight == 3 and worker.millicpus_capacity == 64000
    assert snapshot.millicpus_reserved == sum(lease.reservation.millicpus for lease in load.held)
    (store,) = snapshot.stores
    assert store.name == "cas" and store.blob_count > 12


def test_completed_per_second_from_successive_snapshots() -> None:
    now = [1000.0]
    done = [0]

    def stats() -> SchedulerStatistics:
        return _statistics(completions={"success": done[0]})

    # one snapshot per second, 10 completions between each
    assembler = SnapshotAssembler(address="a", scheduler=stats, clock=lambda: now[0])
    rates = []
    for _ in range(10):
        rates.append(assembler().completed_per_second)
        now[0] += 1.0
        done[0] += 10
    assert rates[0] == 0.0
    assert rates[1:] == [pytest.approx(10.0)] * 9
    assert len(assembler._history) <= 7  # the window is bounded
    now[0] += 5.0  # nothing finished for five seconds
    assert assembler().completed_per_second < 10.0


@dataclass(frozen=True, slots=True)
class _Usage:
    """What the assembler reads of ``lre.worker.ActionUsage``: the memory
    figures are RSS plus private tmpfs (``memory_bytes``)."""

    action_id: str
    memory_bytes: int
    peak_memory_bytes: int
    average_millicpus: int
    kill_line_bytes: int


def test_sampler_usage_joined_by_lease_id() -> None:
    lease = LeaseStatistics(
        operation_name="main/operations/1",
        target_id="",
        summary="gcc",
        reservation=Reservation(2000, 1 << 30),
        exclusive=False,
        attempt=2,
        ladder_step=1,
        started_at=990.0,
        cancelled=False,
        lease_id="local/7",
    )
    stats = _statistics(leases=(lease,))
    usage = [_Usage("local/7", 900 << 20, 950 << 20, 1500, 0), _Usage("other/1", 1, 1, 1, 1)]
    assembler = SnapshotAssembler(
        address="a",
        scheduler=lambda: stats,
        usage=lambda: usage,
        jobserver=lambda: JobserverTokens(1, 3),
        clock=lambda: 1000.0,
        kill_factor=1.5,
    )
    (row,) = assembler().inflight
    assert row.summary == "gcc"
    assert row.elapsed_s == 10.0
    assert (row.rss_bytes, row.peak_rss_bytes, row.cpu_millicpus) == (900 << 20, 950 << 20, 1500)
    assert row.kill_line_bytes == int(1.5 * (1 << 30))  # the sampler reported no line
    assert (row.attempt, row.ladder_step) == (2, 1)
    assert assembler().jobserver == JobserverTokens(1, 3)
    # an action the scheduler cannot name still gets a summary in the row
    unnamed = _statistics(leases=(replace(lease, summary=""),))
    (row,) = SnapshotAssembler(address="a", scheduler=lambda: unnamed)().inflight
    assert row.summary == "?"


def test_event_log_is_a_bounded_ring_with_totals() -> None:
    clock = iter(range(100))
    log = EventLog(3, clock=lambda: float(next(clock)))
    for n in range(5):
        log.add(EventKind.KILL if n % 2 else EventKind.TIMEOUT, f"event {n}")
    assert [e.message for e in log.recent()] == ["event 4", "event 3", "event 2"]
    assert [e.at for e in log.recent(2)] == [4.0, 3.0]
    assert log.totals()["kill"] == 2 and log.totals()["timeout"] == 3
    assert log.totals()["oom"] == 0
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        EventLog(0)


def test_health_board_and_disk_check(tmp_path: Path) -> None:
    board = HealthBoard()
    assert board.problems() == ()
    board.report("upstream", "remote cache unreachable")
    board.add_check("disk", free_space_check(tmp_path, 1 << 62))
    board.add_check("fine", free_space_check(tmp_path, 0))
    problems = board.problems()
    assert problems[0].startswith("disk: disk nearly full: ")
    assert problems[1] == "upstream: remote cache unreachable"
    assert len(problems) == 2
    board.add_check("gone", free_space_check(tmp_path / "missing", 0))
    assert any(p.startswith("gone: check failed: ") for p in board.problems())
    board.clear("upstream")
    assert not any(p.startswith("upstream") for p in board.problems())


def test_summary_and_key_set() -> None:
    assert action_summary("CppCompile", ["/usr/bin/gcc", "-c", "a.c"]) == "CppCompile"
    assert action_summary("", ["clang++", "-c", "a.cc"]) == "clang++"
    assert action_summary("", ["/usr/bin/gcc", "-c", "a.c"]) == "gcc"
    assert action_summary("", []) == ""
    assert platform_key_set("OSFamily=linux,cpu=2,mem=1.0 GiB,exclusive") == (
        "OSFamily,cpu,mem,exclusive"
    )
    assert platform_key_set("") == ""


def _statistics(
    *,
    completions: dict[str, int] | None = None,
    leases: tuple[LeaseStatistics, ...] = (),
) -> SchedulerStatistics:
    worker = RegisteredWorkerStatistics(
        name="local",
        draining=False,
        capacity=Reservation(8000, 8 << 30),
        reserved=Reservation(sum(x.reservation.millicpus for x in leases), 0),
        inflight=len(leases),
        max_inflight=0,
        leases=leases,
    )
    return SchedulerStatistics(
        by_stage=MappingProxyType({"CACHE_CHECK": 0, "QUEUED": 0, "EXECUTING": len(leases)}),
        queued_by_platform=MappingProxyType({}),
        workers=(worker,),
        completions=MappingProxyType(completions or {}),
        submitted=0,
        cache_hits=0,
        dedup_hits=0,
        retries=0,
        backpressure_requeues=0,
        ladder_kills=0,
        lease_cancellations=0,
        watchers=0,
        memory_reserved_bytes=0,
        memory_capacity_bytes=8 << 30,
        memory_budget_bytes=None,
        millicpus_reserved=0,
        millicpus_capacity=8000,
    )
