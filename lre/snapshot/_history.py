"""One finished action as lre's history keeps it, one host sample, one
build's span and one start of lre.

``ActionRecord`` is written by the scheduler for every operation that ends
(executed, served from the action cache through Execute, failed, cancelled)
and by the service for every ``GetActionResult`` hit. ``HostSample`` is what
lre samples of the machine once a second while actions run. ``BuildSpan``
is a build's first request and last reply over every call it made (written
whenever they moved, the newest line of a build wins), with the calls it
still had open then. ``ServerStart`` marks each start of lre: a build whose
newest span still had calls open, followed by a start, was cut short by an
lre that stopped without closing them (``kill -9``, a crash, power). All
have a compact JSON form (one line of the history file; ``to_json``/``from_json``;
``from_json`` raises ``ValueError`` naming the field when a line is not a
record) so that 100,000 actions stay a few tens of MB.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from lre.snapshot._phases import Phase, PhaseSpan, phase_spans

__all__ = [
    "MEMORY_BELOW_IMAGE",
    "MEMORY_KERNEL",
    "MEMORY_SAMPLED",
    "ActionRecord",
    "BuildSpan",
    "HistoryLine",
    "HostSample",
    "ServerStart",
    "Source",
    "WaitReason",
    "memory_mark",
    "record_from_json",
]

#: Where a run's memory figure came from (``ActionRecord.memory_source``):
#: the sampler's passes over its processes (RSS plus private tmpfs) ...
MEMORY_SAMPLED = "sampled"
#: ... the kernel's figure of its reaped processes (``ru_maxrss`` of the
#: largest; a run that ended before its first pass, or whose largest process
#: peaked between passes) ...
MEMORY_KERNEL = "kernel rusage"
#: ... or none: the run ended before its first pass and the kernel's figure
#: was not above lre's own image, which it carries (the figure is then 0:
#: below that image, by how much is unknown).
MEMORY_BELOW_IMAGE = "kernel rusage, below lre's image"


def memory_mark(source: str) -> str:
    """The one-letter mark tables show after a figure: ``s`` sampled, ``k``
    the kernel's rusage (either kind), "" unknown (an older record)."""
    if source == MEMORY_SAMPLED:
        return "s"
    if source in (MEMORY_KERNEL, MEMORY_BELOW_IMAGE):
        return "k"
    return ""


_NO_STAMPS: Mapping[str, float] = MappingProxyType({})


class Source(enum.StrEnum):
    """Where an action's result came from."""

    EXECUTED = "executed"  # lre ran it (or tried to)
    EXECUTE_HIT = "execute_hit"  # Execute answered from the action cache
    LOOKUP_HIT = "lookup_hit"  # GetActionResult answered it (the client never called Execute)
    NOT_RUN = "not_run"  # ended before it ran: missing inputs, cancelled, unmatchable


class WaitReason(enum.StrEnum):
    """What a queued action waited for (the queue says which held it)."""

    CPU = "cpu"  # the worker's free CPU slots
    MEMORY_BUDGET = "memory_budget"  # the memory budget or the worker's memory
    HOST_MEMORY = "host_memory"  # the host's available memory (live veto)
    FROZEN = "frozen"  # memory control held new starts while actions were frozen
    IDLE_WORKER = "idle_worker"  # a whole idle worker (top of the memory ladder)
    WORKER_SLOTS = "worker_slots"  # the worker's max_inflight
    NO_WORKER = "no_worker"  # no registered worker can run it now
    BUILD_SHARE = "build_share"  # another build, which had had less of the machine, went first


#: What people read for each reason.
WAIT_TEXT: Mapping[str, str] = {
    WaitReason.CPU: "CPU slots",
    WaitReason.MEMORY_BUDGET: "memory budget",
    WaitReason.HOST_MEMORY: "host memory",
    WaitReason.FROZEN: "frozen actions",
    WaitReason.IDLE_WORKER: "an idle worker",
    WaitReason.WORKER_SLOTS: "worker slots",
    WaitReason.NO_WORKER: "a worker",
    WaitReason.BUILD_SHARE: "its build's share",
}


@contextmanager
def _fields_of(kind: str) -> Iterator[None]:
    """Turns a missing field (``KeyError``) or a malformed one
    (``TypeError``, ``ValueError``) of a ``kind`` line into a ``ValueError``
    naming both."""
    try:
        yield
    except KeyError as exc:
        raise ValueError(f"{kind} field {exc.args[0]!r} is missing") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{kind} has a malformed field: {exc}") from None


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One action that ended. Times are wall clock (``time.time()``).

    ``stamps`` holds the phase boundaries of the last attempt by
    ``ExecutedActionMetadata`` name (see ``lre.snapshot._phases``; the line
    form keeps them as whole microseconds before ``at``, ``tsu``);
    ``exit_code`` is None when no command ended (an error, a hit);
    ``error`` is the gRPC code name of the error it ended with, or ``""``.
    """

    at: float
    source: Source
    invocation: str = ""
    tool: str = ""
    instance: str = ""
    target: str = ""
    mnemonic: str = ""
    action: str = ""  # action digest hash
    worker: str = ""
    exit_code: int | None = None
    error: str = ""
    submitted_at: float = 0.0
    waited_for: tuple[str, ...] = ()
    reserved_millicpus: int = 0
    reserved_memory_bytes: int = 0
    peak_rss_bytes: int = 0
    #: Where ``peak_rss_bytes`` came from (``MEMORY_*``; "" unknown).
    memory_source: str = ""
    cpu_seconds: float = 0.0
    attempts: int = 0
    kills: int = 0
    retries: int = 0
    freezes: int = 0
    stamps: Mapping[str, float] = field(default_factory=lambda: _NO_STAMPS)
    #: When lre killed an attempt for its memory (wall clock), oldest first.
    killed_at: tuple[float, ...] = ()
    #: Why lre killed it the last time (the memory control's reason), or "".
    kill_reason: str = ""
    #: Whether its last run was killed for its memory (lre gave up on it:
    #: over the hard ceiling, or the last kill ``max_steps`` allows).
    kill_ended: bool = False
    #: The repository its client named (the ``x-lre-repository`` header), or "".
    repository: str = ""

    @property
    def spans(self) -> tuple[PhaseSpan, ...]:
        return phase_spans(self.stamps)

    def phase_seconds(self, phase: Phase) -> float:
        for span in self.spans:
            if span.phase is phase:
                return span.seconds
        return 0.0

    @property
    def wall_seconds(self) -> float:
        """From the Execute request (or the lookup) to the end."""
        return max(0.0, self.at - self.submitted_at) if self.submitted_at else 0.0

    @property
    def queue_seconds(self) -> float:
        return self.phase_seconds(Phase.QUEUED)

    @property
    def cancelled(self) -> bool:
        """Stopped by its client (Ctrl-C, a build that failed elsewhere) or by
        lre's shutdown: not a failure of the action."""
        return self.error == "CANCELLED"

    @property
    def failed(self) -> bool:
        """Ended with an error other than a cancellation, or a non-zero exit."""
        if self.cancelled:
            return False
        return bool(self.error) or (self.exit_code is not None and self.exit_code != 0)

    @property
    def memory_retries(self) -> int:
        """Runs lre itself started again, one ladder step up, after a kill."""
        return max(0, self.kills - (1 if self.kill_ended else 0))

    @property
    def name(self) -> str:
        """What people call it: the target (and mnemonic, or the program when
        the client sent none), else the mnemonic; the digest only when the
        client said nothing and the command was never read."""
        if self.target and self.mnemonic:
            return f"{self.target} {self.mnemonic}"
        if self.target or self.mnemonic:
            return self.target or self.mnemonic
        return f"action {self.action[:12]}" if self.action else "?"

    def to_json(self) -> dict[str, Any]:
        """The compact line form (defaults left out)."""
        out: dict[str, Any] = {"k": "a", "at": round(self.at, 4), "src": self.source.value}
        if self.invocation:
            out["inv"] = self.invocation
        if self.tool:
            out["tool"] = self.tool
        if self.instance:
            out["inst"] = self.instance
        if self.target:
            out["tgt"] = self.target
        if self.mnemonic:
            out["mn"] = self.mnemonic
        if self.action:
            out["act"] = self.action
        if self.worker:
            out["wk"] = self.worker
        if self.error:
            out["err"] = self.error
        if self.submitted_at:
            out["sub"] = round(self.submitted_at, 4)
        if self.waited_for:
            out["wait"] = list(self.waited_for)
        if self.reserved_millicpus:
            out["mcpu"] = self.reserved_millicpus
        if self.reserved_memory_bytes:
            out["mem"] = self.reserved_memory_bytes
        if self.peak_rss_bytes:
            out["rss"] = self.peak_rss_bytes
        if self.memory_source:
            out["msrc"] = self.memory_source
        if self.cpu_seconds:
            out["cpu"] = round(self.cpu_seconds, 4)
        if self.attempts:
            out["n"] = self.attempts
        if self.kills:
            out["kill"] = self.kills
        if self.retries:
            out["retry"] = self.retries
        if self.freezes:
            out["frz"] = self.freezes
        if self.exit_code is not None:
            out["exit"] = self.exit_code
        at = self.at
        if self.stamps:  # whole microseconds after ``at``: short, and ints encode fast
            out["tsu"] = {k: int((v - at) * 1e6) for k, v in self.stamps.items()}
        if self.killed_at:
            out["klu"] = [int((v - at) * 1e6) for v in self.killed_at]
        if self.kill_reason:
            out["kwhy"] = self.kill_reason
        if self.kill_ended:
            out["kend"] = 1
        if self.repository:
            out["repo"] = self.repository
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ActionRecord:
        """Raises ``ValueError`` naming the field that is missing or malformed."""
        with _fields_of("history record"):
            exit_code = data.get("exit")
            at = float(data["at"])
            offsets = data.get("tsu") or {}
            if not isinstance(offsets, Mapping):
                raise TypeError("tsu: expected an object")
            stamps = {str(k): at + int(v) / 1e6 for k, v in offsets.items()}
            return cls(
                at=at,
                source=Source(data["src"]),
                invocation=str(data.get("inv", "")),
                tool=str(data.get("tool", "")),
                instance=str(data.get("inst", "")),
                target=str(data.get("tgt", "")),
                mnemonic=str(data.get("mn", "")),
                action=str(data.get("act", "")),
                worker=str(data.get("wk", "")),
                exit_code=None if exit_code is None else int(exit_code),
                error=str(data.get("err", "")),
                submitted_at=float(data.get("sub", 0.0)),
                waited_for=tuple(str(r) for r in data.get("wait", ())),
                reserved_millicpus=int(data.get("mcpu", 0)),
                reserved_memory_bytes=int(data.get("mem", 0)),
                peak_rss_bytes=int(data.get("rss", 0)),
                memory_source=str(data.get("msrc", "")),
                cpu_seconds=float(data.get("cpu", 0.0)),
                attempts=int(data.get("n", 0)),
                kills=int(data.get("kill", 0)),
                retries=int(data.get("retry", 0)),
                freezes=int(data.get("frz", 0)),
                stamps=MappingProxyType(stamps),
                killed_at=tuple(at + int(v) / 1e6 for v in data.get("klu", ())),
                kill_reason=str(data.get("kwhy", "")),
                kill_ended=bool(data.get("kend", 0)),
                repository=str(data.get("repo", "")),
            )


@dataclass(frozen=True, slots=True)
class HostSample:
    """The machine and lre's reservations at ``at``: ``cpu_percent`` of all
    cores (0-100), memory in use, reserved CPU and memory, actions running,
    and the memory budget of lre's workers (0: none)."""

    at: float
    cpu_percent: float
    memory_used_bytes: int
    memory_total_bytes: int
    reserved_millicpus: int
    reserved_memory_bytes: int
    running: int
    memory_budget_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "k": "s",
            "at": round(self.at, 3),
            "cpu": round(self.cpu_percent, 1),
            "used": self.memory_used_bytes,
            "total": self.memory_total_bytes,
            "mcpu": self.reserved_millicpus,
            "mem": self.reserved_memory_bytes,
            "run": self.running,
        }
        if self.memory_budget_bytes:
            out["bud"] = self.memory_budget_bytes
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HostSample:
        with _fields_of("host sample"):
            return cls(
                at=float(data["at"]),
                cpu_percent=float(data["cpu"]),
                memory_used_bytes=int(data["used"]),
                memory_total_bytes=int(data.get("total", 0)),
                reserved_millicpus=int(data.get("mcpu", 0)),
                reserved_memory_bytes=int(data.get("mem", 0)),
                running=int(data.get("run", 0)),
                memory_budget_bytes=int(data.get("bud", 0)),
            )


@dataclass(frozen=True, slots=True)
class BuildSpan:
    """One build (tool invocation id) as lre's gRPC front saw it at ``at``:
    its first request (``first_at``), its last reply (``last_at``: the end of
    a call or a message of a stream), the repository and tool it named, and
    how many of its calls were still open (``open_calls``)."""

    at: float
    invocation: str
    first_at: float
    last_at: float
    repository: str = ""
    tool: str = ""
    open_calls: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "k": "b",
            "at": round(self.at, 3),
            "inv": self.invocation,
            "first": round(self.first_at, 4),
            "last": round(self.last_at, 4),
        }
        if self.repository:
            out["repo"] = self.repository
        if self.tool:
            out["tool"] = self.tool
        if self.open_calls:
            out["open"] = self.open_calls
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BuildSpan:
        with _fields_of("build span"):
            return cls(
                at=float(data["at"]),
                invocation=str(data["inv"]),
                first_at=float(data["first"]),
                last_at=float(data["last"]),
                repository=str(data.get("repo", "")),
                tool=str(data.get("tool", "")),
                open_calls=int(data.get("open", 0)),
            )


@dataclass(frozen=True, slots=True)
class ServerStart:
    """lre (process ``pid``) started serving at ``at``."""

    at: float
    pid: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"k": "up", "at": round(self.at, 3), "pid": self.pid}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServerStart:
        with _fields_of("start line"):
            return cls(at=float(data["at"]), pid=int(data.get("pid", 0)))


#: Every kind of history line.
HistoryLine = ActionRecord | HostSample | BuildSpan | ServerStart


def record_from_json(data: Mapping[str, Any]) -> HistoryLine:
    """The record one history line holds (``k`` tells which); ``ValueError`` otherwise."""
    kind = data.get("k")
    if kind == "a":
        return ActionRecord.from_json(data)
    if kind == "s":
        return HostSample.from_json(data)
    if kind == "b":
        return BuildSpan.from_json(data)
    if kind == "up":
        return ServerStart.from_json(data)
    raise ValueError(f"history line kind {kind!r} is not 'a', 's', 'b' or 'up'")
