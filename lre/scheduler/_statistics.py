"""Frozen snapshots of the scheduler's state (the TUI and /metrics read only these)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lre.scheduler._model import Reservation


@dataclass(frozen=True, slots=True)
class LeaseStatistics:
    operation_name: str
    action_hash: str
    kind_key: str
    mnemonic: str
    target_id: str
    reservation: Reservation
    exclusive: bool
    attempt: int
    ladder_step: int
    started_at: float  # wall clock
    cancelled: bool


@dataclass(frozen=True, slots=True)
class WorkerStatistics:
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
    requirement label. ``completions`` counts finished operations by outcome:
    ``success`` (exit 0), ``nonzero_exit``, ``cached``, ``error`` (any error
    status, including timeouts), ``cancelled``.
    """

    by_stage: Mapping[str, int]
    queued_by_platform: Mapping[str, int]
    workers: tuple[WorkerStatistics, ...]
    completions: Mapping[str, int]
    submitted: int
    cache_hits: int
    dedup_hits: int
    retries: int
    backpressure_requeues: int
    ladder_kills: int
    lease_cancellations: int
    watchers: int
    retained_operations: int
    memory_reserved_bytes: int
    memory_capacity_bytes: int
    memory_budget_bytes: int | None
    millicpus_reserved: int
    millicpus_capacity: int
