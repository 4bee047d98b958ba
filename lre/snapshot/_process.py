"""``ProcessSnapshot``: one frozen picture of the whole lre process, and its
JSON form (``to_json`` / ``from_json``, ``dumps`` / ``loads``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from lre.snapshot._events import RecentEvent
from lre.snapshot._json import (
    event_from_json,
    int_map,
    optional_int,
    plain,
    row_from_json,
    upstream_from_json,
)
from lre.snapshot._phases import Phase, PhaseHistogram
from lre.snapshot._rows import (
    EMPTY_COUNTS,
    BuildLine,
    BuildShareRow,
    HostUsage,
    InflightAction,
    JobserverTokens,
    MemoryControlRow,
    QueuedAction,
    StoreRow,
    UpstreamRow,
    WorkerRow,
)

__all__ = ["SCHEMA_VERSION", "ProcessSnapshot"]

#: Bumped when a field changes meaning or disappears (adding one does not).
SCHEMA_VERSION = 1


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
    by_stage: Mapping[str, int] = field(default_factory=lambda: EMPTY_COUNTS)
    queued_by_platform: Mapping[str, int] = field(default_factory=lambda: EMPTY_COUNTS)
    completions: Mapping[str, int] = field(default_factory=lambda: EMPTY_COUNTS)
    submitted: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    dedup_hits: int = 0
    retries: int = 0
    backpressure_requeues: int = 0
    ladder_kills: int = 0
    #: of ``ladder_kills``, those lre answered by running the action again
    ladder_requeues: int = 0
    lease_cancellations: int = 0
    memory_reserved_bytes: int = 0
    memory_capacity_bytes: int = 0
    memory_budget_bytes: int | None = None
    millicpus_reserved: int = 0
    millicpus_capacity: int = 0
    workers: tuple[WorkerRow, ...] = ()
    #: Per local worker: frozen, thawed, killed for memory, and whether memory is short.
    memory_control: tuple[MemoryControlRow, ...] = ()
    inflight: tuple[InflightAction, ...] = ()
    stores: tuple[StoreRow, ...] = ()
    jobserver: JobserverTokens | None = None
    completed_per_second: float = 0.0
    events: tuple[RecentEvent, ...] = ()
    event_totals: Mapping[str, int] = field(default_factory=lambda: EMPTY_COUNTS)
    upstreams: tuple[UpstreamRow, ...] = ()
    #: The next queued actions and what each waits for.
    queued_next: tuple[QueuedAction, ...] = ()
    host: HostUsage | None = None
    #: The current build (if one runs) and the last one, newest first.
    builds: tuple[BuildLine, ...] = ()
    #: Each build with actions queued or running and its fair share.
    build_shares: tuple[BuildShareRow, ...] = ()
    #: Per-phase duration histograms of every action recorded since start.
    phases: tuple[PhaseHistogram, ...] = ()
    #: Hits as the client sees them, since ``client_hits_since`` (epoch s;
    #: kept across restarts, reset by ``lre stats --zero``): GetActionResult
    #: hits, Execute cache hits, and actions lre ran.
    client_get_action_result_hits: int = 0
    client_execute_hits: int = 0
    client_misses: int = 0
    client_hits_since: float = 0.0
    #: What lre says about its cache (why upstream lookups keep missing).
    cache_notices: tuple[str, ...] = ()

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
    def client_hits(self) -> int:
        """GetActionResult hits plus Execute cache hits (``client_hits_since``)."""
        return self.client_get_action_result_hits + self.client_execute_hits

    @property
    def cache_hit_ratio(self) -> float | None:
        """The client's hits / (hits + misses) since ``client_hits_since``,
        None before the first lookup."""
        looked_up = self.client_hits + self.client_misses
        return self.client_hits / looked_up if looked_up else None

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
            out[f.name] = plain(getattr(self, f.name))
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
            host = data.get("host")
            return cls(
                taken_at=float(data["taken_at"]),
                started_at=float(data["started_at"]),
                address=str(data["address"]),
                status_address=str(data.get("status_address", "")),
                containment=str(data.get("containment", "")),
                problems=tuple(str(p) for p in data.get("problems", ())),
                by_stage=int_map(data.get("by_stage", {})),
                queued_by_platform=int_map(data.get("queued_by_platform", {})),
                completions=int_map(data.get("completions", {})),
                submitted=int(data.get("submitted", 0)),
                cache_hits=int(data.get("cache_hits", 0)),
                cache_misses=int(data.get("cache_misses", 0)),
                dedup_hits=int(data.get("dedup_hits", 0)),
                retries=int(data.get("retries", 0)),
                backpressure_requeues=int(data.get("backpressure_requeues", 0)),
                ladder_kills=int(data.get("ladder_kills", 0)),
                ladder_requeues=int(data.get("ladder_requeues", 0)),
                lease_cancellations=int(data.get("lease_cancellations", 0)),
                memory_reserved_bytes=int(data.get("memory_reserved_bytes", 0)),
                memory_capacity_bytes=int(data.get("memory_capacity_bytes", 0)),
                memory_budget_bytes=optional_int(data.get("memory_budget_bytes")),
                millicpus_reserved=int(data.get("millicpus_reserved", 0)),
                millicpus_capacity=int(data.get("millicpus_capacity", 0)),
                workers=tuple(row_from_json(WorkerRow, w) for w in data.get("workers", ())),
                memory_control=tuple(_memory_row(m) for m in data.get("memory_control", ())),
                inflight=tuple(row_from_json(InflightAction, a) for a in data.get("inflight", ())),
                stores=tuple(row_from_json(StoreRow, s) for s in data.get("stores", ())),
                jobserver=None if jobserver is None else row_from_json(JobserverTokens, jobserver),
                completed_per_second=float(data.get("completed_per_second", 0.0)),
                events=tuple(event_from_json(e) for e in data.get("events", ())),
                event_totals=int_map(data.get("event_totals", {})),
                upstreams=tuple(upstream_from_json(u) for u in data.get("upstreams", ())),
                queued_next=tuple(
                    row_from_json(QueuedAction, q) for q in data.get("queued_next", ())
                ),
                host=None if host is None else row_from_json(HostUsage, host),
                builds=tuple(row_from_json(BuildLine, b) for b in data.get("builds", ())),
                build_shares=tuple(
                    row_from_json(BuildShareRow, b) for b in data.get("build_shares", ())
                ),
                phases=tuple(phase_from_json(p) for p in data.get("phases", ())),
                client_get_action_result_hits=int(data.get("client_get_action_result_hits", 0)),
                client_execute_hits=int(data.get("client_execute_hits", 0)),
                client_misses=int(data.get("client_misses", 0)),
                client_hits_since=float(data.get("client_hits_since", 0.0)),
                cache_notices=tuple(str(n) for n in data.get("cache_notices", ())),
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


def phase_from_json(value: Any) -> PhaseHistogram:
    if not isinstance(value, Mapping):
        raise TypeError(f"phases: expected an object, got {type(value).__name__}")
    return PhaseHistogram(
        phase=Phase(value["phase"]),
        bucket_counts=tuple(int(n) for n in value["bucket_counts"]),
        count=int(value["count"]),
        sum_seconds=float(value["sum_seconds"]),
    )


def _memory_row(value: Any) -> MemoryControlRow:
    row = row_from_json(MemoryControlRow, value)
    return replace(row, frozen_leases=tuple(str(x) for x in row.frozen_leases))
