"""The scheduler: operations, queue, matching, reservations and dedup.

The local scheduler is pure Trio and serves no gRPC. Only the forward
scheduler's ``UpstreamExecutor`` speaks gRPC: it calls an upstream Execution
service with grpc.aio through ``lre.upstream``'s client, on the asyncio
thread of an ``UpstreamLoop``. Clients (the Execution and Operations
services) see a scheduler as an ``ActionScheduler`` (``submit`` / ``watch`` /
``get_operation`` / ``list_operations`` / ``cancel`` / ``delete``);
in-process workers see it as a ``WorkerScheduler`` (``register_worker`` /
``lease`` / ``report`` / ``heartbeat`` / ``set_draining`` /
``unregister_worker``); the TUI and /metrics read ``statistics()``.

CPU is counted in thousandths ("millicpus") everywhere inside lre; the only
conversion from the clients' whole-CPU ``cpu_count`` is in ``_units``.
"""

from lre.scheduler._events import SchedulerEvent
from lre.scheduler._forward import (
    ForwardedOperation,
    ForwardScheduler,
    ForwardStatistics,
)
from lre.scheduler._forward_upstream import UpstreamExecutor, UpstreamOutcome
from lre.scheduler._history import RecordBuilder, RecordHook, metadata_stamps
from lre.scheduler._kind import kind_key
from lre.scheduler._learner import ReservationEstimate, ReservationLearner
from lre.scheduler._lease import CancelSignal, Lease
from lre.scheduler._matching import (
    Requirements,
    apply_modifications,
    explain_unsatisfiable,
    matches_statically,
    platform_of,
    requirements_of,
)
from lre.scheduler._model import (
    ActionKey,
    Backpressure,
    Completed,
    InfrastructureFailure,
    MemoryExceeded,
    OperationSnapshot,
    Outcome,
    RequestInfo,
    Reservation,
    ResourcePolicy,
    Stage,
    Usage,
    WorkerInfo,
)
from lre.scheduler._names import new_operation_name, parse_operation_name
from lre.scheduler._protocols import ActionResultReader, ReservationAdvisor
from lre.scheduler._roles import ActionScheduler, WorkerScheduler
from lre.scheduler._scheduler import Scheduler
from lre.scheduler._statistics import (
    LeaseStatistics,
    QueuedStatistics,
    RegisteredWorkerStatistics,
    SchedulerStatistics,
)
from lre.scheduler._units import (
    CPU_PROPERTY,
    MEMORY_PROPERTY,
    bytes_from_memory_kb,
    cpu_count_text,
    memory_text,
    millicpus_from_cpu_count,
)
from lre.scheduler._watch import OperationWatch

__all__ = [
    "CPU_PROPERTY",
    "MEMORY_PROPERTY",
    "ActionKey",
    "ActionResultReader",
    "ActionScheduler",
    "Backpressure",
    "CancelSignal",
    "Completed",
    "ForwardScheduler",
    "ForwardStatistics",
    "ForwardedOperation",
    "InfrastructureFailure",
    "Lease",
    "LeaseStatistics",
    "MemoryExceeded",
    "OperationSnapshot",
    "OperationWatch",
    "Outcome",
    "QueuedStatistics",
    "RecordBuilder",
    "RecordHook",
    "RegisteredWorkerStatistics",
    "RequestInfo",
    "Requirements",
    "Reservation",
    "ReservationAdvisor",
    "ReservationEstimate",
    "ReservationLearner",
    "ResourcePolicy",
    "Scheduler",
    "SchedulerEvent",
    "SchedulerStatistics",
    "Stage",
    "UpstreamExecutor",
    "UpstreamOutcome",
    "Usage",
    "WorkerInfo",
    "WorkerScheduler",
    "apply_modifications",
    "bytes_from_memory_kb",
    "cpu_count_text",
    "explain_unsatisfiable",
    "kind_key",
    "matches_statically",
    "memory_text",
    "metadata_stamps",
    "millicpus_from_cpu_count",
    "new_operation_name",
    "parse_operation_name",
    "platform_of",
    "requirements_of",
]
