"""Local workers: take a leased action, stage its inputs, run it, report.

``LocalWorker`` is the live worker built by ``lre.app`` from a
``LocalWorkerSpec``, its store and a ``WorkerHost`` (what the app worked out
for it on this host); ``ActionRunner`` runs one leased action end to end;
``WorkDirectory`` is a worker's locked private directory; ``Containment``
(from ``choose_containment``) keeps each action's processes within its life;
``PressureMonitor`` (built by the composition root with a worker's headroom)
reads the host's memory for the worker's memory control and the
scheduler's admission; the memory control tells each freeze and thaw
as a ``MemoryAction`` (``LocalWorker.memory.on_event``).
"""

from lre.worker._view_policy import refuse_unreachable, refuse_unsafe_writable
from lre.worker._worker import LocalWorker, LocalWorkerStatistics, WorkerHost
from lre.worker.containment import (
    Containment,
    ContainmentUnavailable,
    choose_containment,
    missing_protections,
    namespace_refusals,
    resolve_action_user,
)
from lre.worker.directories import QuarantinedEntry, quarantined
from lre.worker.memory import MemoryAction, PressureMonitor
from lre.worker.usage import SkipLog, keep_reserve, using_reserve

__all__ = [
    "Containment",
    "ContainmentUnavailable",
    "LocalWorker",
    "LocalWorkerStatistics",
    "MemoryAction",
    "PressureMonitor",
    "QuarantinedEntry",
    "SkipLog",
    "WorkerHost",
    "choose_containment",
    "keep_reserve",
    "missing_protections",
    "namespace_refusals",
    "quarantined",
    "refuse_unreachable",
    "refuse_unsafe_writable",
    "resolve_action_user",
    "using_reserve",
]
