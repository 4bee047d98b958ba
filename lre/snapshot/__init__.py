"""The snapshot model: what lre shows of itself, as plain frozen data.

``ProcessSnapshot`` is one picture of the whole process; its rows are
``InflightAction``, ``WorkerRow``, ``StoreRow``, ``UpstreamRow``,
``JobserverTokens`` and ``RecentEvent`` (tagged with an ``EventKind``).
A snapshot round-trips through JSON (``to_json`` / ``from_json``,
``dumps`` / ``loads``; ``from_json`` raises ``ValueError`` naming the field
when the document is not a snapshot of ``SCHEMA_VERSION``), which is how
``lre top`` and ``lre stats`` read one from ``/api/v1/stats``.
``action_summary`` is the one rule for what an action is called.

The history lives here too, so ``lre history``/``builds``/``trace``/``report``
read it with lre down: the phase model (``Phase``, ``phase_spans``), one
finished action (``ActionRecord``) or host sample (``HostSample``), the
bounded ring file (``HistoryFile``, ``read_history``) and builds grouped by
tool invocation id (``summarize_builds``).

This package imports only the standard library, so the dashboard and the
scheduler can both use it without loading the server. The composition root
(``lre.app``) builds snapshots from the live components.
"""

from lre.snapshot._builds import BuildSummary, find_build, summarize_builds
from lre.snapshot._events import EventKind, RecentEvent
from lre.snapshot._history import (
    MEMORY_BELOW_IMAGE,
    MEMORY_KERNEL,
    MEMORY_SAMPLED,
    WAIT_TEXT,
    ActionRecord,
    BuildSpan,
    HistoryLine,
    HostSample,
    ServerStart,
    Source,
    WaitReason,
    memory_mark,
)
from lre.snapshot._history_file import HistoryFile, read_history
from lre.snapshot._phases import (
    BOUNDARIES,
    PHASE_BUCKETS_S,
    PHASES,
    Phase,
    PhaseHistogram,
    PhaseSpan,
)
from lre.snapshot._process import ProcessSnapshot
from lre.snapshot._rows import (
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
from lre.snapshot._summary import action_summary

__all__ = [
    "BOUNDARIES",
    "MEMORY_BELOW_IMAGE",
    "MEMORY_KERNEL",
    "MEMORY_SAMPLED",
    "PHASES",
    "PHASE_BUCKETS_S",
    "WAIT_TEXT",
    "ActionRecord",
    "BuildLine",
    "BuildShareRow",
    "BuildSpan",
    "BuildSummary",
    "EventKind",
    "HistoryFile",
    "HistoryLine",
    "HostSample",
    "HostUsage",
    "InflightAction",
    "JobserverTokens",
    "MemoryControlRow",
    "Phase",
    "PhaseHistogram",
    "PhaseSpan",
    "ProcessSnapshot",
    "QueuedAction",
    "RecentEvent",
    "ServerStart",
    "Source",
    "StoreRow",
    "UpstreamRow",
    "WaitReason",
    "WorkerRow",
    "action_summary",
    "find_build",
    "memory_mark",
    "read_history",
    "summarize_builds",
]
