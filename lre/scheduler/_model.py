"""Frozen values the scheduler exchanges with clients and workers."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lre.digest import Digest, DigestFunction
from lre.errors import LreError
from lre.proto import re_pb2

_EMPTY: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ActionKey:
    """What identifies an action for dedup and the action cache."""

    instance_name: str
    digest_function: DigestFunction
    action_digest: Digest


@dataclass(frozen=True, slots=True)
class Reservation:
    """Resources an action holds while it runs, or a worker offers.

    ``millicpus`` counts thousandths of a CPU (``cpu_count=2`` is 2000; the
    conversion lives only in ``lre.scheduler._units``). ``memory_bytes`` is
    bytes. ``extra`` holds any other ``minimum`` platform property by name,
    in the property's own unit.
    """

    millicpus: int = 0
    memory_bytes: int = 0
    extra: Mapping[str, int] = field(default_factory=lambda: _EMPTY)

    def __add__(self, other: Reservation) -> Reservation:
        if not other.extra:
            return Reservation(
                self.millicpus + other.millicpus, self.memory_bytes + other.memory_bytes, self.extra
            )
        extra = dict(self.extra)
        for name, amount in other.extra.items():
            extra[name] = extra.get(name, 0) + amount
        return Reservation(
            self.millicpus + other.millicpus,
            self.memory_bytes + other.memory_bytes,
            MappingProxyType(extra),
        )

    def __sub__(self, other: Reservation) -> Reservation:
        if not other.extra:
            return Reservation(
                self.millicpus - other.millicpus, self.memory_bytes - other.memory_bytes, self.extra
            )
        extra = dict(self.extra)
        for name, amount in other.extra.items():
            extra[name] = extra.get(name, 0) - amount
        return Reservation(
            self.millicpus - other.millicpus,
            self.memory_bytes - other.memory_bytes,
            MappingProxyType(extra),
        )

    def fits_in(self, free: Reservation) -> bool:
        """True when every amount of ``self`` is at most the one in ``free``."""
        if self.millicpus > free.millicpus or self.memory_bytes > free.memory_bytes:
            return False
        if not self.extra:
            return True
        return all(amount <= free.extra.get(name, 0) for name, amount in self.extra.items())


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What the client said about itself and the action (the REAPI
    ``RequestMetadata`` header, and ``repository`` from lre's own
    ``x-lre-repository`` header); empty strings when it said nothing.
    ``peer`` is the gRPC connection the request came on (``context.peer()``),
    filled only when the request names neither an invocation nor a
    repository: the build such a request counts under (``_fair_share``)."""

    tool_name: str = ""
    tool_version: str = ""
    action_id: str = ""
    tool_invocation_id: str = ""
    correlated_invocations_id: str = ""
    action_mnemonic: str = ""
    target_id: str = ""
    configuration_id: str = ""
    repository: str = ""
    peer: str = ""

    @classmethod
    def from_proto(
        cls, message: re_pb2.RequestMetadata | None, repository: str = ""
    ) -> RequestInfo:
        if message is None:
            return cls(repository=repository)
        return cls(
            tool_name=message.tool_details.tool_name,
            tool_version=message.tool_details.tool_version,
            action_id=message.action_id,
            tool_invocation_id=message.tool_invocation_id,
            correlated_invocations_id=message.correlated_invocations_id,
            action_mnemonic=message.action_mnemonic,
            target_id=message.target_id,
            configuration_id=message.configuration_id,
            repository=repository,
        )


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker as the scheduler sees it.

    ``properties`` holds the values offered for ``exact``/``priority`` keys.
    ``minimum`` keys are read from ``capacity`` only: ``cpu_count`` from
    ``capacity.millicpus``, ``memory_kb`` from ``capacity.memory_bytes``, any
    other from ``capacity.extra[key]``. ``max_inflight`` 0 means unlimited.
    """

    name: str
    properties: Mapping[str, frozenset[str]]
    capacity: Reservation
    max_inflight: int = 0
    max_action_timeout_s: float = 3600.0
    default_timeout_s: float = 1200.0


class Stage(enum.IntEnum):
    """``ExecutionStage.Value`` (same numbers)."""

    UNKNOWN = 0
    CACHE_CHECK = 1
    QUEUED = 2
    EXECUTING = 3
    COMPLETED = 4


@dataclass(frozen=True, slots=True)
class OperationSnapshot:
    """One operation as a client sees it at one moment.

    When ``done``: ``result`` is the ActionResult (possibly partial, e.g. after
    a timeout) or None, ``cached_result`` tells whether it came from the
    action cache, and ``error`` is the domain error the execution ended with
    (None = OK). The service turns ``error`` into ``ExecuteResponse.status``,
    never into ``Operation.error``.
    """

    name: str
    stage: Stage
    action_key: ActionKey
    done: bool
    result: re_pb2.ActionResult | None = None
    cached_result: bool = False
    error: LreError | None = None
    message: str = ""
    queued_at: float = 0.0

    @property
    def instance_name(self) -> str:
        return self.action_key.instance_name


# ------------------------------------------------------------------ outcomes


@dataclass(frozen=True, slots=True)
class Usage:
    """What the worker measured for one run (whole process tree).
    ``wall_seconds`` leaves out ``frozen_seconds``, the time the memory
    control kept the run stopped (SIGSTOP). ``peak_rss_bytes`` is the
    run's memory figure (its processes' RSS plus its private tmpfs), and
    ``memory_source`` says where it came from (``lre.snapshot.MEMORY_*``;
    "" unknown)."""

    peak_rss_bytes: int
    cpu_seconds: float
    wall_seconds: float
    frozen_seconds: float = 0.0
    memory_source: str = ""

    @property
    def average_millicpus(self) -> int:
        if self.wall_seconds <= 0:
            return 0
        return round(self.cpu_seconds / self.wall_seconds * 1000)


@dataclass(frozen=True, slots=True)
class Completed:
    """The action ran. ``error`` is e.g. ``DeadlineExceeded`` for a timeout
    (``result`` then holds the partial output), or None. A non-zero exit code is
    a plain result with ``error`` None, never retried."""

    result: re_pb2.ActionResult
    error: LreError | None = None
    message: str = ""
    usage: Usage | None = None
    #: The kernel's OOM killer (not lre) killed the action.
    oom_killed: bool = False


@dataclass(frozen=True, slots=True)
class InfrastructureFailure:
    """lre, not the action, failed (staging, internal error, lost worker).
    Requeued up to ``max_job_retries`` times, then the operation ends with
    ``error``."""

    error: LreError
    usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class Backpressure:
    """The worker declined (precondition script). Requeued without counting an
    attempt; the worker is expected to pause itself."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class MemoryExceeded:
    """The worker killed the action because memory was short (``reason`` says
    why). Requeued one ladder step up; not a retry. After ``max_steps`` kills,
    or at once when ``final`` (it passed the hard ceiling, the top step), the
    operation ends: with ``result`` when the worker gave one (the killed
    run's result, exit code 137 and lre's explanation on its stderr, never
    cached), which the client takes as the action's own failure and does
    not retry; else with RESOURCE_EXHAUSTED naming the peak and the steps."""

    peak_rss_bytes: int
    usage: Usage | None = None
    reason: str = ""
    final: bool = False
    result: re_pb2.ActionResult | None = None


Outcome = Completed | InfrastructureFailure | Backpressure | MemoryExceeded


@dataclass(frozen=True, slots=True)
class ResourcePolicy:
    """How the scheduler sizes memory reservations.

    - ``cold_memory_bytes``: reserved by a kind of action the advisor has never
      seen (0 = nothing) when the client asked for less.
    - ``ladder``: memory reserved after successive ``MemoryExceeded`` kills;
      past its top the action reserves a whole idle worker.
    - ``max_steps``: kills after which the operation fails with
      RESOURCE_EXHAUSTED.
    - ``memory_budget_bytes``: what all running actions together may reserve
      (None = only each worker's capacity bounds memory).
    """

    cold_memory_bytes: int = 0
    ladder: tuple[int, ...] = ()
    max_steps: int = 5
    memory_budget_bytes: int | None = None
