"""``ProcessSnapshot``: one frozen picture of the whole lre process.

The TUI, ``/api/v1/stats``, ``/metrics`` and ``lre stats --json`` all read a
``ProcessSnapshot``; nothing else of lre's live state leaves the Trio thread.
The composition root builds one ``SnapshotAssembler`` from callables that
return the components' own frozen statistics (scheduler, samplers, stores,
jobserver pools) plus an ``EventLog`` (``_events.py``) and a ``HealthBoard``
(``_health.py``) it feeds, both re-exported here, and
hands the assembler (a ``SnapshotSource``) to the status listener and the
dashboard. Calling it must happen on the Trio thread.

A snapshot round-trips through JSON (``to_json`` / ``from_json``) so
``lre top`` can rebuild it from ``/api/v1/stats``. ``from_json`` raises
``ValueError`` naming the field when the document is not a snapshot of this
schema version.
"""

from __future__ import annotations

import enum
import json
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from lre.app._events import EventKind, EventLog, RecentEvent
from lre.app._health import HealthBoard, HealthCheck, free_space_check
from lre.cas import StoreStatistics
from lre.scheduler import LeaseStatistics, SchedulerStatistics

__all__ = [
    "SCHEMA_VERSION",
    "EventKind",
    "EventLog",
    "HealthBoard",
    "HealthCheck",
    "InflightAction",
    "JobserverTokens",
    "ProcessSnapshot",
    "RecentEvent",
    "SampledUsage",
    "SnapshotAssembler",
    "SnapshotSource",
    "StoreRow",
    "UpstreamRow",
    "WorkerRow",
    "action_summary",
    "free_space_check",
    "platform_key_set",
]

#: Bumped when a field changes meaning or disappears (adding one does not).
SCHEMA_VERSION = 1

_EMPTY: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class InflightAction:
    """One running action. ``rss_bytes``/``peak_rss_bytes``/``cpu_millicpus`` are
    None until the sampler has seen it; ``kill_line_bytes`` 0 means no line.
    ``operation`` is for people (the TUI, the JSON); metrics never use it."""

    operation: str
    summary: str
    target: str
    worker: str
    elapsed_s: float
    reserved_millicpus: int
    reserved_memory_bytes: int
    kill_line_bytes: int
    rss_bytes: int | None
    peak_rss_bytes: int | None
    cpu_millicpus: int | None
    ladder_step: int
    attempt: int
    exclusive: bool = False
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class WorkerRow:
    name: str
    draining: bool
    inflight: int
    max_inflight: int  # 0 = unlimited
    millicpus_reserved: int
    millicpus_capacity: int
    memory_reserved_bytes: int
    memory_capacity_bytes: int


@dataclass(frozen=True, slots=True)
class StoreRow:
    name: str
    blob_count: int
    used_bytes: int
    max_bytes: int  # 0 = unbounded
    evicted_blobs: int
    evicted_bytes: int


@dataclass(frozen=True, slots=True)
class UpstreamRow:
    """One connection to an upstream REAPI server (a grpc store, or a forward
    scheduler's Execution client): its health and its counters (bounded
    keys: read-through ``ac_hits``/``ac_misses``/``read_blobs``/``read_bytes``,
    ``forwarded_<reason>``, ``fallback_<grpc code>``, ``refused_<grpc code>``,
    ``completed_upstream``, ``fell_back_local``)."""

    name: str
    address: str
    state: str  # "unknown", "up" or "down"
    last_error: str = ""
    calls: int = 0
    failed_calls: int = 0
    retries: int = 0
    counters: Mapping[str, int] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class JobserverTokens:
    """Tokens of all live jobserver pools: held by clients now, and in total."""

    in_use: int
    total: int


@dataclass(frozen=True, slots=True)
class ProcessSnapshot:
    """Everything the dashboard and the metrics show, at ``taken_at`` (wall clock).

    Counters (``completions``, ``cache_hits``, ...) are totals since
    ``started_at``. ``cache_misses`` counts submitted operations that were
    neither answered from the action cache nor joined a running duplicate.
    ``completed_per_second`` is averaged over the last few seconds of
    snapshots taken by the same assembler.
    """

    taken_at: float
    started_at: float
    address: str
    status_address: str = ""
    #: How action processes are contained (``pidns``, ``portable``; several
    #: workers with different modes: ``name=mode`` pairs).
    containment: str = ""
    problems: tuple[str, ...] = ()
    by_stage: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    queued_by_platform: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    completions: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    submitted: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    dedup_hits: int = 0
    retries: int = 0
    backpressure_requeues: int = 0
    ladder_kills: int = 0
    lease_cancellations: int = 0
    memory_reserved_bytes: int = 0
    memory_capacity_bytes: int = 0
    memory_budget_bytes: int | None = None
    millicpus_reserved: int = 0
    millicpus_capacity: int = 0
    workers: tuple[WorkerRow, ...] = ()
    inflight: tuple[InflightAction, ...] = ()
    stores: tuple[StoreRow, ...] = ()
    jobserver: JobserverTokens | None = None
    completed_per_second: float = 0.0
    events: tuple[RecentEvent, ...] = ()
    event_totals: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    upstreams: tuple[UpstreamRow, ...] = ()

    # ------------------------------------------------------------------ derived

    @property
    def healthy(self) -> bool:
        return not self.problems

    @property
    def uptime_s(self) -> float:
        return max(0.0, self.taken_at - self.started_at)

    @property
    def running(self) -> int:
        return len(self.inflight)

    @property
    def queued(self) -> int:
        return self.by_stage.get("QUEUED", 0)

    @property
    def completed(self) -> int:
        return sum(self.completions.values())

    @property
    def cache_hit_ratio(self) -> float | None:
        """Hits / (hits + misses), None before the first lookup."""
        looked_up = self.cache_hits + self.cache_misses
        return self.cache_hits / looked_up if looked_up else None

    @property
    def effective_memory_capacity_bytes(self) -> int:
        """The smaller of the global budget and the workers' capacity."""
        if self.memory_budget_bytes is None:
            return self.memory_capacity_bytes
        return min(self.memory_budget_bytes, self.memory_capacity_bytes)

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``json.dumps`` works on it directly)."""
        out: dict[str, Any] = {"schema": SCHEMA_VERSION}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = _to_plain(value)
        return out

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessSnapshot:
        """Rebuild a snapshot from ``to_json`` output (unknown keys are ignored,
        so a newer server can add fields). Raises ``ValueError`` naming the
        field that is missing or has the wrong shape."""
        if data.get("schema") != SCHEMA_VERSION:
            raise ValueError(
                f"schema: expected {SCHEMA_VERSION}, got {data.get('schema')!r}"
                " (lre and lre top are different versions?)"
            )
        try:
            jobserver = data.get("jobserver")
            return cls(
                taken_at=float(data["taken_at"]),
                started_at=float(data["started_at"]),
                address=str(data["address"]),
                status_address=str(data.get("status_address", "")),
                containment=str(data.get("containment", "")),
                problems=tuple(str(p) for p in data.get("problems", ())),
                by_stage=_int_map(data.get("by_stage", {})),
                queued_by_platform=_int_map(data.get("queued_by_platform", {})),
                completions=_int_map(data.get("completions", {})),
                submitted=int(data.get("submitted", 0)),
                cache_hits=int(data.get("cache_hits", 0)),
                cache_misses=int(data.get("cache_misses", 0)),
                dedup_hits=int(data.get("dedup_hits", 0)),
                retries=int(data.get("retries", 0)),
                backpressure_requeues=int(data.get("backpressure_requeues", 0)),
                ladder_kills=int(data.get("ladder_kills", 0)),
                lease_cancellations=int(data.get("lease_cancellations", 0)),
                memory_reserved_bytes=int(data.get("memory_reserved_bytes", 0)),
                memory_capacity_bytes=int(data.get("memory_capacity_bytes", 0)),
                memory_budget_bytes=_opt_int(data.get("memory_budget_bytes")),
                millicpus_reserved=int(data.get("millicpus_reserved", 0)),
                millicpus_capacity=int(data.get("millicpus_capacity", 0)),
                workers=tuple(_record(WorkerRow, w) for w in data.get("workers", ())),
                inflight=tuple(_record(InflightAction, a) for a in data.get("inflight", ())),
                stores=tuple(_record(StoreRow, s) for s in data.get("stores", ())),
                jobserver=None if jobserver is None else _record(JobserverTokens, jobserver),
                completed_per_second=float(data.get("completed_per_second", 0.0)),
                events=tuple(_event(e) for e in data.get("events", ())),
                event_totals=_int_map(data.get("event_totals", {})),
                upstreams=tuple(_upstream(u) for u in data.get("upstreams", ())),
            )
        except KeyError as exc:
            raise ValueError(f"snapshot field {exc.args[0]!r} is missing") from None
        except (TypeError, AttributeError) as exc:
            raise ValueError(f"snapshot has a field of the wrong shape: {exc}") from None

    @classmethod
    def loads(cls, text: str | bytes) -> ProcessSnapshot:
        """Parse ``dumps`` output; ``ValueError`` if it is not JSON or not a snapshot."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"snapshot must be a JSON object, got {type(data).__name__}")
        return cls.from_json(data)


def _to_plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _to_plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_to_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: _to_plain(getattr(value, f.name)) for f in fields(value)}
    return value


def _int_map(value: Any) -> Mapping[str, int]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected an object of counts, got {type(value).__name__}")
    return MappingProxyType({str(k): int(v) for k, v in value.items()})


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


_T = TypeVar("_T")


def _record(cls: type[_T], value: Any) -> _T:
    if not isinstance(value, Mapping):
        raise TypeError(f"{cls.__name__}: expected an object, got {type(value).__name__}")
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    missing = [
        f.name
        for f in fields(cls)  # type: ignore[arg-type]
        if f.name not in value and f.default is MISSING and f.default_factory is MISSING
    ]
    if missing:
        raise KeyError(f"{cls.__name__}.{missing[0]}")
    return cls(**{k: v for k, v in value.items() if k in names})


def _upstream(value: Any) -> UpstreamRow:
    row = _record(UpstreamRow, value)
    return replace(row, counters=_int_map(row.counters))


def _event(value: Any) -> RecentEvent:
    if not isinstance(value, Mapping):
        raise TypeError(f"event: expected an object, got {type(value).__name__}")
    return RecentEvent(
        at=float(value["at"]),
        kind=EventKind(value["kind"]),
        message=str(value.get("message", "")),
        summary=str(value.get("summary", "")),
        worker=str(value.get("worker", "")),
        peak_rss_bytes=_opt_int(value.get("peak_rss_bytes")),
    )


# ---------------------------------------------------------------------- assembly


def action_summary(mnemonic: str, kind_key: str) -> str:
    """What the TUI calls an action: the client's mnemonic (Bazel), else the
    mnemonic or program named by its kind key (``bazel:CppCompile:...``,
    ``cmd:gcc:...``; see ``lre.scheduler.kind_key``)."""
    if mnemonic:
        return mnemonic
    for prefix in ("cmd:", "bazel:"):
        if kind_key.startswith(prefix):
            return kind_key[len(prefix) :].partition(":")[0] or "?"
    return kind_key or "?"


def platform_key_set(label: str) -> str:
    """The keys of a scheduler requirement label, values dropped:
    ``"OSFamily=linux,cpu=2,mem=1 GiB"`` -> ``"OSFamily,cpu,mem"``. Bounded by
    the configured property names, so safe as a metric label."""
    if not label:
        return ""
    return ",".join(part.partition("=")[0] for part in label.split(","))


class SampledUsage(Protocol):
    """What the assembler reads of a sampler's per-action snapshot
    (``lre.worker``'s ``ActionUsage`` has these; ``action_id`` is the lease id)."""

    @property
    def action_id(self) -> str: ...
    @property
    def rss_bytes(self) -> int: ...
    @property
    def peak_rss_bytes(self) -> int: ...
    @property
    def average_millicpus(self) -> int: ...
    @property
    def kill_line_bytes(self) -> int: ...


class SnapshotSource(Protocol):
    """What the status listener and the in-process dashboard call (Trio thread)."""

    def __call__(self) -> ProcessSnapshot: ...


def _lease_id(lease: LeaseStatistics) -> str:
    # LeaseStatistics does not carry the lease id yet (the sampler keys actions
    # by it); until it does, in-flight rows show no RSS/CPU.
    value = getattr(lease, "lease_id", "")
    return value if isinstance(value, str) else ""


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
        self._kill_factor = kill_factor
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
                )
                for name, s in sorted(stores.items())
            ),
            jobserver=self._jobserver() if self._jobserver else None,
            events=self.events.recent(50),
            event_totals=self.events.totals(),
            upstreams=tuple(self._upstreams()) if self._upstreams else (),
        )
        if stats is not None:
            snapshot = _with_scheduler(snapshot, stats, usage, now, self._kill_factor)
        rate = self._rate(now, snapshot.completed)
        return replace(snapshot, completed_per_second=rate)

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


def _with_scheduler(
    snapshot: ProcessSnapshot,
    stats: SchedulerStatistics,
    usage: Mapping[str, SampledUsage],
    now: float,
    kill_factor: float,
) -> ProcessSnapshot:
    inflight: list[InflightAction] = []
    for worker in stats.workers:
        for lease in worker.leases:
            sampled = usage.get(_lease_id(lease))
            memory = lease.reservation.memory_bytes
            if sampled is not None and sampled.kill_line_bytes:
                kill_line = sampled.kill_line_bytes
            else:
                kill_line = int(memory * kill_factor) if memory > 0 else 0
            inflight.append(
                InflightAction(
                    operation=lease.operation_name,
                    summary=action_summary(lease.mnemonic, lease.kind_key),
                    target=lease.target_id,
                    worker=worker.name,
                    elapsed_s=max(0.0, now - lease.started_at),
                    reserved_millicpus=lease.reservation.millicpus,
                    reserved_memory_bytes=memory,
                    kill_line_bytes=kill_line,
                    rss_bytes=None if sampled is None else sampled.rss_bytes,
                    peak_rss_bytes=None if sampled is None else sampled.peak_rss_bytes,
                    cpu_millicpus=None if sampled is None else sampled.average_millicpus,
                    ladder_step=lease.ladder_step,
                    attempt=lease.attempt,
                    exclusive=lease.exclusive,
                    cancelled=lease.cancelled,
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
    )
