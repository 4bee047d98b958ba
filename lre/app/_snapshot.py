"""``SnapshotAssembler``: builds ``lre.snapshot.ProcessSnapshot``s from the live components.

The TUI, ``/api/v1/stats``, ``/metrics`` and ``lre stats --json`` all read a
``ProcessSnapshot``; nothing else of lre's live state leaves the Trio thread.
The composition root builds one ``SnapshotAssembler`` from callables that
return the components' own frozen statistics (scheduler, samplers, stores,
jobserver pools) plus an ``EventLog`` (``_events.py``) and a ``HealthBoard``
(``_health.py``) it feeds, and hands the assembler (a ``SnapshotSource``) to
the status listener and the dashboard. Calling it must happen on the Trio
thread. The snapshot model itself (rows, JSON form, event kinds) lives in
``lre.snapshot``, which the dashboard imports without loading the server.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Protocol

from lre.app._events import EventLog
from lre.app._health import HealthBoard
from lre.app._history import HistoryRecorder
from lre.app._hits import HitCounts
from lre.cas import StoreStatistics
from lre.scheduler import SchedulerStatistics
from lre.snapshot import (
    InflightAction,
    JobserverTokens,
    MemoryControlRow,
    ProcessSnapshot,
    StoreRow,
    UpstreamRow,
    WorkerRow,
)

__all__ = ["SampledUsage", "SnapshotAssembler", "SnapshotSource"]


class SampledUsage(Protocol):
    """What the assembler reads of a sampler's per-action snapshot
    (``lre.worker``'s ``ActionUsage`` has these; ``action_id`` is the lease id)."""

    @property
    def action_id(self) -> str: ...
    @property
    def memory_bytes(self) -> int: ...
    @property
    def peak_memory_bytes(self) -> int: ...
    @property
    def average_millicpus(self) -> int: ...
    @property
    def kill_line_bytes(self) -> int: ...


class SnapshotSource(Protocol):
    """What the status listener and the in-process dashboard call (Trio thread)."""

    def __call__(self) -> ProcessSnapshot: ...


@dataclass(frozen=True, slots=True)
class _Rate:
    at: float
    completed: int


class SnapshotAssembler:
    """Builds ``ProcessSnapshot``s from live components; a ``SnapshotSource``.

    - ``scheduler``: ``Scheduler.statistics`` (None when this process has no
      scheduler, e.g. a cache-only config).
    - ``usage``: every sampler's ``snapshots()``, keyed by action id = lease id.
    - ``stores``: store name -> ``StoreStatistics`` of the bounded stores.
    - ``jobserver``: tokens of the live pools, or None when no worker uses one.
    - ``upstreams``: one ``UpstreamRow`` per upstream connection.
    - ``kill_factor``: the kill line is reservation x this when the sampler
      has not reported a line itself.
    - ``history``: the history recorder (host usage, build lines, phase
      histograms), or None.

    Any of these callables raising propagates (a bug, not a state to show).
    """

    #: Seconds of history ``completed_per_second`` averages over.
    RATE_WINDOW_S = 5.0

    def __init__(
        self,
        *,
        address: str,
        status_address: str = "",
        scheduler: Callable[[], SchedulerStatistics] | None = None,
        usage: Callable[[], Iterable[SampledUsage]] | None = None,
        stores: Callable[[], Mapping[str, StoreStatistics]] | None = None,
        jobserver: Callable[[], JobserverTokens | None] | None = None,
        events: EventLog | None = None,
        health: HealthBoard | None = None,
        upstreams: Callable[[], Iterable[UpstreamRow]] | None = None,
        kill_factor: float = 1.2,
        history: HistoryRecorder | None = None,
        hits: Callable[[], HitCounts] | None = None,
        started_at: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.address = address
        self.status_address = status_address
        #: Set by the composition root (see ``ProcessSnapshot.containment``).
        self.containment = ""
        self._scheduler = scheduler
        self._usage = usage
        self._stores = stores
        self._jobserver = jobserver
        self.events = events if events is not None else EventLog()
        self.health = health if health is not None else HealthBoard()
        self._upstreams = upstreams
        self.kill_factor = kill_factor
        self._recorder = history
        #: Set by the composition root once the hit counts are loaded.
        self.hits = hits
        #: What the cache has to say (``MissReport.notices``), if anything.
        self.cache_notices: Callable[[], tuple[str, ...]] | None = None
        #: The local workers' memory control rows (set by the composition root).
        self.memory_control: Callable[[], tuple[MemoryControlRow, ...]] | None = None
        self._clock = clock
        self.started_at = clock() if started_at is None else started_at
        self._history: deque[_Rate] = deque()

    def __call__(self) -> ProcessSnapshot:
        now = self._clock()
        usage = {u.action_id: u for u in self._usage()} if self._usage else {}
        stores = self._stores() if self._stores else {}
        stats = self._scheduler() if self._scheduler else None
        snapshot = ProcessSnapshot(
            taken_at=now,
            started_at=self.started_at,
            address=self.address,
            status_address=self.status_address,
            containment=self.containment,
            problems=self.health.problems(),
            stores=tuple(
                StoreRow(
                    name=name,
                    blob_count=s.blob_count,
                    used_bytes=s.stored_bytes,
                    max_bytes=s.max_bytes,
                    evicted_blobs=s.evicted_blobs,
                    evicted_bytes=s.evicted_bytes,
                    overrun_bytes=s.overrun_bytes,
                    min_free_bytes=s.min_free_bytes,
                    keep_told_s=s.keep_told_s,
                )
                for name, s in sorted(stores.items())
            ),
            jobserver=self._jobserver() if self._jobserver else None,
            events=self.events.recent(50),
            event_totals=self.events.totals(),
            upstreams=tuple(self._upstreams()) if self._upstreams else (),
        )
        recorder = self._recorder
        if recorder is not None:
            snapshot = replace(
                snapshot,
                host=recorder.host,
                builds=recorder.build_lines(_running_builds(stats)),
                phases=recorder.phase_histograms(),
            )
        memory_rows = self.memory_control() if self.memory_control is not None else ()
        snapshot = replace(snapshot, memory_control=memory_rows)
        frozen = {lease for row in memory_rows for lease in row.frozen_leases}
        if stats is not None:
            snapshot = _with_scheduler(snapshot, stats, usage, now, self.kill_factor, frozen)
        rate = self._rate(now, snapshot.completed)
        snapshot = replace(snapshot, completed_per_second=rate)
        if self.hits is not None:
            hits = self.hits()
            snapshot = replace(
                snapshot,
                client_get_action_result_hits=hits.get_action_result_hits,
                client_execute_hits=hits.execute_hits,
                client_misses=hits.misses,
                client_hits_since=hits.since,
            )
        if self.cache_notices is not None:
            snapshot = replace(snapshot, cache_notices=self.cache_notices())
        return snapshot

    def _rate(self, now: float, completed: int) -> float:
        history = self._history
        history.append(_Rate(now, completed))
        while len(history) > 2 and now - history[1].at >= self.RATE_WINDOW_S:
            history.popleft()
        first = history[0]
        span = now - first.at
        if span <= 0:
            return 0.0
        return max(0.0, (completed - first.completed) / span)


def _running_builds(stats: SchedulerStatistics | None) -> dict[str, tuple[str, float]]:
    """Each build with an action running now: invocation id -> (client, when
    its oldest running action started)."""
    builds: dict[str, tuple[str, float]] = {}
    for worker in stats.workers if stats is not None else ():
        for lease in worker.leases:
            known = builds.get(lease.invocation)
            if known is None or lease.started_at < known[1]:
                builds[lease.invocation] = (lease.tool, lease.started_at)
    return builds


def _with_scheduler(
    snapshot: ProcessSnapshot,
    stats: SchedulerStatistics,
    usage: Mapping[str, SampledUsage],
    now: float,
    kill_factor: float,
    frozen: AbstractSet[str] = frozenset(),
) -> ProcessSnapshot:
    inflight: list[InflightAction] = []
    for worker in stats.workers:
        for lease in worker.leases:
            sampled = usage.get(lease.lease_id)
            memory = lease.reservation.memory_bytes
            if sampled is not None and sampled.kill_line_bytes:
                kill_line = sampled.kill_line_bytes
            else:
                kill_line = int(memory * kill_factor) if memory > 0 else 0
            inflight.append(
                InflightAction(
                    operation=lease.operation_name,
                    summary=lease.summary or "?",
                    target=lease.target_id,
                    worker=worker.name,
                    elapsed_s=max(0.0, now - lease.started_at),
                    reserved_millicpus=lease.reservation.millicpus,
                    reserved_memory_bytes=memory,
                    kill_line_bytes=kill_line,
                    # RSS plus private tmpfs: what the memory control weighs
                    rss_bytes=None if sampled is None else sampled.memory_bytes,
                    peak_rss_bytes=None if sampled is None else sampled.peak_memory_bytes,
                    cpu_millicpus=None if sampled is None else sampled.average_millicpus,
                    ladder_step=lease.ladder_step,
                    attempt=lease.attempt,
                    exclusive=lease.exclusive,
                    cancelled=lease.cancelled,
                    frozen=lease.lease_id in frozen,
                )
            )
    inflight.sort(key=lambda a: (-a.elapsed_s, a.operation))
    looked_up = stats.submitted - stats.dedup_hits
    return replace(
        snapshot,
        by_stage=MappingProxyType(dict(stats.by_stage)),
        queued_by_platform=MappingProxyType(dict(stats.queued_by_platform)),
        completions=MappingProxyType(dict(stats.completions)),
        submitted=stats.submitted,
        cache_hits=stats.cache_hits,
        cache_misses=max(0, looked_up - stats.cache_hits),
        dedup_hits=stats.dedup_hits,
        retries=stats.retries,
        backpressure_requeues=stats.backpressure_requeues,
        ladder_kills=stats.ladder_kills,
        ladder_requeues=stats.ladder_requeues,
        lease_cancellations=stats.lease_cancellations,
        memory_reserved_bytes=stats.memory_reserved_bytes,
        memory_capacity_bytes=stats.memory_capacity_bytes,
        memory_budget_bytes=stats.memory_budget_bytes,
        millicpus_reserved=stats.millicpus_reserved,
        millicpus_capacity=stats.millicpus_capacity,
        workers=tuple(
            WorkerRow(
                name=w.name,
                draining=w.draining,
                inflight=w.inflight,
                max_inflight=w.max_inflight,
                millicpus_reserved=w.reserved.millicpus,
                millicpus_capacity=w.capacity.millicpus,
                memory_reserved_bytes=w.reserved.memory_bytes,
                memory_capacity_bytes=w.capacity.memory_bytes,
            )
            for w in stats.workers
        ),
        inflight=tuple(inflight),
        queued_next=stats.queued_next,
        build_shares=stats.builds,
    )
