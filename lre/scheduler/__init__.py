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
from lre.scheduler._history import RecordBuilder, RecordHook
from lre.scheduler._learner import ReservationEstimate, ReservationLearner
from lre.scheduler._lease import CancelSignal, Lease
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
from lre.scheduler._names import parse_operation_name
from lre.scheduler._protocols import ActionResultReader, ReservationAdvisor
from lre.scheduler._roles import ActionScheduler, WorkerScheduler
from lre.scheduler._scheduler import Scheduler
from lre.scheduler._statistics import (
    LeaseStatistics,
    RegisteredWorkerStatistics,
    SchedulerStatistics,
)
from lre.scheduler._units import memory_text
from lre.scheduler._watch import OperationWatch

__all__ = [
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
    "RecordBuilder",
    "RecordHook",
    "RegisteredWorkerStatistics",
    "RequestInfo",
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
    "memory_text",
    "parse_operation_name",
]
