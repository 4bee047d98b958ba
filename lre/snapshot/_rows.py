"""The rows a ``ProcessSnapshot`` holds: running actions, workers, stores,
upstream connections and jobserver tokens. Plain frozen data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "EMPTY_COUNTS",
    "BuildLine",
    "HostUsage",
    "InflightAction",
    "JobserverTokens",
    "MemoryControlRow",
    "QueuedAction",
    "StoreRow",
    "UpstreamRow",
    "WorkerRow",
]

#: The empty mapping every counts field defaults to.
EMPTY_COUNTS: Mapping[str, int] = MappingProxyType({})


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
    #: Stopped by the memory control while memory is short.
    frozen: bool = False


@dataclass(frozen=True, slots=True)
class MemoryControlRow:
    """One local worker's memory control: counts since start and the state now
    (``short_reason`` "" = memory is not short; ``frozen_leases`` are the
    leases whose actions are stopped now; ``sampling``: what wakes the
    control besides its timer, "psi trigger: ..." or "timer: <why none>";
    ``pressure_events``: PSI stall events that woke it)."""

    worker: str
    frozen_now: int
    frozen: int
    thawed: int
    killed: int
    short_reason: str
    available_bytes: int
    pressure_full_avg10: float | None = None
    frozen_leases: tuple[str, ...] = ()
    sampling: str = ""
    pressure_events: int = 0


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
    #: Bytes held beyond max_bytes because the cache contract keeps them.
    overrun_bytes: int = 0
    #: The free-disk floor the store keeps while it overruns (0: none).
    min_free_bytes: int = 0
    #: How long a blob lre told a client exists is kept (0: no contract).
    keep_told_s: float = 0.0


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
    counters: Mapping[str, int] = field(default_factory=lambda: EMPTY_COUNTS)


@dataclass(frozen=True, slots=True)
class JobserverTokens:
    """Tokens of all live jobserver pools: held by clients now, and in total."""

    in_use: int
    total: int


@dataclass(frozen=True, slots=True)
class QueuedAction:
    """One of the next queued actions: ``waiting_for`` is a ``WaitReason``
    value (``""`` when nothing held it yet: it is next in line)."""

    operation: str
    target: str
    summary: str
    platform: str
    waiting_for: str
    queued_s: float
    reserved_millicpus: int
    reserved_memory_bytes: int


@dataclass(frozen=True, slots=True)
class BuildShareRow:
    """One build with actions queued or running, as the fair queue sees it:
    the fraction of the workers it is entitled to now (``fair_share``) and
    the dominant fraction its running actions reserve (``used_share``)."""

    invocation: str
    repository: str
    tool: str
    weight: float
    fair_share: float
    used_share: float
    running: int
    queued: int


@dataclass(frozen=True, slots=True)
class HostUsage:
    """What the machine uses now (all processes, not only lre's actions)."""

    cpu_percent: float
    cpu_count: int
    memory_used_bytes: int
    memory_total_bytes: int


@dataclass(frozen=True, slots=True)
class BuildLine:
    """The TUI's line of one build (the current one or the last)."""

    invocation: str
    client: str
    started_at: float
    ended_at: float
    executed: int
    cache_hits: int
    failed: int
    killed: int
    running: bool
    #: stopped by the client or lre's shutdown (not counted in ``failed``)
    cancelled: int = 0
    #: The repository its client named ("" none).
    repository: str = ""
