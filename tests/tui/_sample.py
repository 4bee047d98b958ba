"""A known ``ProcessSnapshot`` for rendering tests (every field set, fixed times)."""

from __future__ import annotations

from types import MappingProxyType

from lre.snapshot import (
    PHASE_BUCKETS_S,
    BuildLine,
    EventKind,
    HostUsage,
    InflightAction,
    JobserverTokens,
    Phase,
    PhaseHistogram,
    ProcessSnapshot,
    QueuedAction,
    RecentEvent,
    StoreRow,
    WorkerRow,
)

GIB = 1 << 30
MIB = 1 << 20
T0 = 1_800_000_000.0


def _action(
    n: int,
    summary: str,
    *,
    elapsed: float,
    rss: int | None,
    reserved: int,
    kill_factor: float = 1.2,
    cpu: int | None = 950,
    millicpus: int = 1000,
    step: int = 0,
    attempt: int = 1,
    target: str = "",
    worker: str = "local",
    exclusive: bool = False,
) -> InflightAction:
    return InflightAction(
        operation=f"main/operations/{n:04d}",
        summary=summary,
        target=target,
        worker=worker,
        elapsed_s=elapsed,
        reserved_millicpus=millicpus,
        reserved_memory_bytes=reserved,
        kill_line_bytes=int(reserved * kill_factor),
        rss_bytes=rss,
        peak_rss_bytes=None if rss is None else rss + 10 * MIB,
        cpu_millicpus=cpu,
        ladder_step=step,
        attempt=attempt,
        exclusive=exclusive,
    )


def sample_snapshot() -> ProcessSnapshot:
    inflight = (
        _action(
            1,
            "CppCompile",
            elapsed=3.2,
            rss=120 * MIB,
            reserved=512 * MIB,
            target="//src/core:engine",
        ),
        _action(
            2,
            "CppLink",
            elapsed=75.0,
            rss=1000 * MIB,
            reserved=1 * GIB,
            step=1,
            millicpus=2000,
            cpu=1830,
            target="//src/app:main_binary_with_a_long_name",
        ),
        _action(3, "gcc", elapsed=12.5, rss=700 * MIB, reserved=512 * MIB, attempt=2),
        _action(4, "Javac", elapsed=0.4, rss=None, reserved=0, cpu=None, target="//java:lib"),
        _action(
            5,
            "rustc",
            elapsed=610.0,
            rss=5 * GIB,
            reserved=8 * GIB,
            step=4,
            millicpus=8000,
            cpu=3100,
            exclusive=True,
            worker="big",
        ),
    )
    events = (
        RecentEvent(
            T0 + 3590,
            EventKind.KILL,
            "killed over its line of 614.4M; requeued at 1.0G",
            "CppLink",
            "local",
            650 * MIB,
            target="//src/app:main_binary_with_a_long_name",
        ),
        RecentEvent(
            T0 + 3550,
            EventKind.ESCALATION,
            "requeued at ladder step 4 (8.0G)",
            "rustc",
            "big",
            4200 * MIB,
        ),
        RecentEvent(
            T0 + 3400,
            EventKind.TIMEOUT,
            "exceeded its timeout of 600s",
            "Genrule",
            "local",
            target="//gen:slow",
        ),
        RecentEvent(T0 + 3000, EventKind.UNMATCHABLE, "no worker offers OSFamily=windows"),
        RecentEvent(
            T0 + 100, EventKind.BACKPRESSURE, "worker precondition script said no", worker="local"
        ),
    )
    return ProcessSnapshot(
        taken_at=T0 + 3600,
        started_at=T0,
        address="127.0.0.1:50051",
        status_address="127.0.0.1:50061",
        by_stage=MappingProxyType({"CACHE_CHECK": 1, "QUEUED": 42, "EXECUTING": 5}),
        queued_by_platform=MappingProxyType({"OSFamily=linux": 39, "OSFamily=windows": 3}),
        queued_next=(
            QueuedAction(
                "main/operations/0010",
                "//src/core:parser",
                "CppCompile",
                "OSFamily=linux",
                "cpu",
                4.0,
                1000,
                512 * MIB,
            ),
            QueuedAction(
                "main/operations/0011",
                "//src/app:tests",
                "CppLink",
                "OSFamily=linux",
                "memory_budget",
                2.5,
                2000,
                1 * GIB,
            ),
            QueuedAction(
                "main/operations/0012",
                "//win:tool",
                "Genrule",
                "OSFamily=windows",
                "no_worker",
                1.0,
                1000,
                0,
            ),
            QueuedAction(
                "main/operations/0013",
                "",
                "gcc",
                "OSFamily=linux",
                "",
                0.2,
                1000,
                0,
            ),
        ),
        host=HostUsage(
            cpu_percent=87.0, cpu_count=16, memory_used_bytes=14 * GIB, memory_total_bytes=24 * GIB
        ),
        builds=(
            BuildLine("5f0c3a52-8d7e", "bazel 7.1.0", T0 + 3465, T0 + 3599, 120, 80, 1, 2, True),
            BuildLine(
                "a1b2c3d4-0000", "bazel 7.1.0", T0 + 1000, T0 + 1300, 40, 400, 0, 0, False, 44
            ),
        ),
        completions=MappingProxyType(
            {"success": 900, "nonzero_exit": 7, "cached": 310, "error": 2, "cancelled": 1}
        ),
        submitted=1300,
        cache_hits=310,
        cache_misses=950,
        client_get_action_result_hits=250,
        client_execute_hits=60,
        client_misses=950,
        dedup_hits=40,
        retries=3,
        backpressure_requeues=1,
        ladder_kills=4,
        lease_cancellations=1,
        memory_reserved_bytes=10 * GIB + 512 * MIB,
        memory_capacity_bytes=24 * GIB,
        memory_budget_bytes=12 * GIB,
        millicpus_reserved=13000,
        millicpus_capacity=16000,
        workers=(
            WorkerRow("big", False, 1, 1, 8000, 8000, 8 * GIB, 12 * GIB),
            WorkerRow("local", False, 4, 16, 5000, 8000, 2 * GIB + 512 * MIB, 12 * GIB),
        ),
        inflight=inflight,
        stores=(StoreRow("cas", 120_000, 3 * GIB + 200 * MIB, 10 * GIB, 5000, 900 * MIB),),
        jobserver=JobserverTokens(in_use=5, total=14),
        completed_per_second=3.4,
        phases=tuple(
            PhaseHistogram(phase, tuple(range(len(PHASE_BUCKETS_S))), 100, 12.5) for phase in Phase
        ),
        events=events,
        event_totals=MappingProxyType({k.value: 1 for k in EventKind}),
    )
