"""Frozen snapshots of the scheduler's state (the TUI and /metrics read only these)."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from lre.errors import Cancelled, LreError
from lre.proto import re_pb2
from lre.scheduler._model import Reservation, Stage
from lre.scheduler._records import OperationState, WorkerState
from lre.snapshot import BuildShareRow, QueuedAction, action_summary

if TYPE_CHECKING:
    from lre.scheduler._fair_share import BuildShares
    from lre.scheduler._queue import Bucket

_NO_COUNTS: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class LeaseStatistics:
    """One running lease. ``lease_id`` is ``Lease.lease_id`` (what the worker's
    sampler keys its per-action usage by). ``summary`` is what the action is
    called (``lre.snapshot.action_summary``: the mnemonic, else the program;
    ``""`` when neither is known). ``invocation`` and ``tool`` are the
    client's tool invocation id and "name version" (the build it belongs to)."""

    operation_name: str
    target_id: str
    summary: str
    reservation: Reservation
    exclusive: bool
    attempt: int
    ladder_step: int
    started_at: float  # wall clock
    cancelled: bool
    lease_id: str = ""
    invocation: str = ""
    tool: str = ""


@dataclass(frozen=True, slots=True)
class RegisteredWorkerStatistics:
    """The scheduler's view of one registered worker: what it offers, what
    its leases reserve now and the leases themselves."""

    name: str
    draining: bool
    capacity: Reservation
    reserved: Reservation
    inflight: int
    max_inflight: int  # 0 = unlimited
    leases: tuple[LeaseStatistics, ...]


@dataclass(frozen=True, slots=True)
class SchedulerStatistics:
    """Counters are totals since start; the rest is the state at the snapshot.

    ``by_stage`` counts live operations per stage name (CACHE_CHECK, QUEUED,
    EXECUTING). ``queued_by_platform`` counts queued operations per
    platform (``OSFamily=linux``, not split by sized reservation);
    ``queued_by_reservation`` per platform and reservation;
    ``queued_next`` lists the operations that would run first; ``builds``
    the builds with actions queued or running, with their shares (empty
    when fair sharing is off). ``completions``
    counts finished operations by outcome:
    ``success`` (exit 0), ``nonzero_exit``, ``cached``, ``error`` (any error
    status, including timeouts), ``cancelled``.
    """

    by_stage: Mapping[str, int]
    queued_by_platform: Mapping[str, int]
    workers: tuple[RegisteredWorkerStatistics, ...]
    completions: Mapping[str, int]
    submitted: int
    cache_hits: int
    dedup_hits: int
    retries: int
    backpressure_requeues: int
    ladder_kills: int
    lease_cancellations: int
    #: Clients watching an operation now (a leak check: 0 once all is done).
    watchers: int
    memory_reserved_bytes: int
    memory_capacity_bytes: int
    memory_budget_bytes: int | None
    millicpus_reserved: int
    millicpus_capacity: int
    queued_by_reservation: Mapping[str, int] = field(default_factory=lambda: _NO_COUNTS)
    queued_next: tuple[QueuedAction, ...] = ()
    #: Ladder kills lre answered by running the action again one step up
    #: (``ladder_kills`` less the kills it gave up after).
    ladder_requeues: int = 0
    builds: tuple[BuildShareRow, ...] = ()


def build_statistics(shares: BuildShares) -> tuple[BuildShareRow, ...]:
    """The builds of ``shares`` with work queued or running, most entitled
    first (the heavier weight, then the build key)."""
    if not shares.enabled:
        return ()
    active = sorted(
        (build for build in shares.builds.values() if build.queued or build.running),
        key=lambda build: (-build.weight, build.key),
    )
    return tuple(
        BuildShareRow(
            invocation=build.invocation,
            repository=build.repository,
            tool=build.tool,
            weight=build.weight,
            fair_share=shares.fair_fraction(build),
            used_share=shares.used_fraction(build),
            running=build.running,
            queued=build.queued,
        )
        for build in active
    )


def completion_kind(
    *, result: re_pb2.ActionResult | None, cached: bool, error: LreError | None
) -> str:
    """The ``SchedulerStatistics.completions`` key an operation that ended so counts under."""
    if cached:
        return "cached"
    if isinstance(error, Cancelled):
        return "cancelled"
    if error is not None:
        return "error"
    if result is not None and result.exit_code != 0:
        return "nonzero_exit"
    return "success"


def _tool(name: str, version: str) -> str:
    return f"{name} {version}".strip()


def collect_statistics(
    *,
    workers: Iterable[WorkerState],
    queued_by_platform: Mapping[str, int],
    stage_counts: Mapping[Stage, int],
    completions: Mapping[str, int],
    counters: Mapping[str, int],
    operations: Collection[OperationState],
    memory_reserved: int,
    memory_budget: int | None,
    queued_by_reservation: Mapping[str, int] | None = None,
    queued_next: Iterable[tuple[OperationState, Bucket]] = (),
    builds: tuple[BuildShareRow, ...] = (),
) -> SchedulerStatistics:
    """A frozen ``SchedulerStatistics`` of the scheduler's records."""
    now = time.time()  # the clock of ``OperationState.queued_at``
    rows = []
    capacity_cpu = capacity_mem = reserved_cpu = 0
    for state in workers:
        capacity_cpu += state.info.capacity.millicpus
        capacity_mem += state.info.capacity.memory_bytes
        reserved_cpu += state.reserved.millicpus
        leases = tuple(
            LeaseStatistics(
                lease_id=r.lease.lease_id,
                operation_name=r.op.name,
                target_id=r.lease.request_info.target_id,
                summary=action_summary(
                    r.lease.request_info.action_mnemonic, r.lease.command.arguments
                ),
                reservation=r.lease.reservation,
                exclusive=r.lease.exclusive,
                attempt=r.lease.attempt,
                ladder_step=r.lease.ladder_step,
                started_at=r.started_at,
                cancelled=r.lease.cancelled,
                invocation=r.lease.request_info.tool_invocation_id,
                tool=_tool(r.lease.request_info.tool_name, r.lease.request_info.tool_version),
            )
            for r in state.leases.values()
        )
        rows.append(
            RegisteredWorkerStatistics(
                name=state.info.name,
                draining=state.draining,
                capacity=state.info.capacity,
                reserved=state.reserved,
                inflight=len(state.leases),
                max_inflight=state.info.max_inflight,
                leases=leases,
            )
        )
    return SchedulerStatistics(
        by_stage=MappingProxyType(
            {
                stage.name: stage_counts.get(stage, 0)
                for stage in (Stage.CACHE_CHECK, Stage.QUEUED, Stage.EXECUTING)
            }
        ),
        queued_by_platform=MappingProxyType(dict(queued_by_platform)),
        workers=tuple(rows),
        completions=MappingProxyType(dict(completions)),
        submitted=counters.get("submitted", 0),
        cache_hits=counters.get("cache_hits", 0),
        dedup_hits=counters.get("dedup_hits", 0),
        retries=counters.get("retries", 0),
        backpressure_requeues=counters.get("backpressure", 0),
        ladder_kills=counters.get("ladder_kills", 0),
        ladder_requeues=counters.get("ladder_requeues", 0),
        lease_cancellations=counters.get("lease_cancellations", 0),
        watchers=sum(op.watchers for op in operations),
        memory_reserved_bytes=memory_reserved,
        memory_capacity_bytes=capacity_mem,
        memory_budget_bytes=memory_budget,
        millicpus_reserved=reserved_cpu,
        millicpus_capacity=capacity_cpu,
        queued_by_reservation=MappingProxyType(dict(queued_by_reservation or {})),
        queued_next=tuple(
            QueuedAction(
                operation=op.name,
                target=op.request_info.target_id,
                summary=action_summary(
                    op.request_info.action_mnemonic,
                    op.command.arguments if op.command is not None else (),
                )
                or "?",
                platform=bucket.platform,
                waiting_for=bucket.waiting_for,
                queued_s=max(0.0, now - op.queued_at),
                reserved_millicpus=op.reservation.millicpus,
                reserved_memory_bytes=op.reservation.memory_bytes,
            )
            for op, bucket in queued_next
        ),
        builds=builds,
    )
