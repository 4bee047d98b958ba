"""The scheduler's mutable records: one per operation, worker and lease.

Plain slotted objects touched only on the Trio thread by the scheduler's
modules; nothing outside ``lre.scheduler`` sees them (clients get
``OperationSnapshot``s, workers ``Lease``s, observers statistics).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

import trio

from lre.errors import LreError
from lre.proto import re_pb2
from lre.scheduler._lease import Lease
from lre.scheduler._matching import Requirements
from lre.scheduler._model import (
    ActionKey,
    OperationSnapshot,
    RequestInfo,
    Reservation,
    Stage,
    WorkerInfo,
)

_NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})

if TYPE_CHECKING:
    from lre.scheduler._fair_share import Build
    from lre.scheduler._queue import Bucket


class OperationState:
    """One operation from submission until it is forgotten.

    ``changed`` is replaced (and the old event set) on every change, so a
    watcher waits on the event it saw last. ``bucket``/``ticket`` tie the
    operation to its place in the run queue: a heap entry whose ticket no
    longer matches is stale and skipped.
    """

    __slots__ = (
        "abandon_token",
        "action",
        "attempt",
        "away",
        "bucket",
        "build",
        "cached",
        "cached_snapshot",
        "changed",
        "command",
        "dedup",
        "done",
        "error",
        "exclusive",
        "inline_output_files",
        "inline_stderr",
        "inline_stdout",
        "key",
        "kill_notes",
        "kills",
        "kind_key",
        "ladder_step",
        "lease",
        "message",
        "name",
        "platform",
        "priority",
        "queued_at",
        "request_info",
        "requested_timeout_s",
        "requirements",
        "reservation",
        "result",
        "retries",
        "route_scope",
        "seq",
        "skip_cache_lookup",
        "stage",
        "steps_tried",
        "ticket",
        "wait_mark",
        "waited_for",
        "watchers",
    )

    def __init__(
        self, name: str, key: ActionKey, seq: int, request: re_pb2.ExecuteRequest, info: RequestInfo
    ) -> None:
        self.name = name
        self.key = key
        self.seq = seq
        self.priority = request.execution_policy.priority
        self.skip_cache_lookup = request.skip_cache_lookup
        self.inline_stdout = request.inline_stdout
        self.inline_stderr = request.inline_stderr
        self.inline_output_files = tuple(request.inline_output_files)
        self.request_info = info
        self.stage = Stage.CACHE_CHECK
        self.done = False
        self.result: re_pb2.ActionResult | None = None
        self.cached = False
        self.error: LreError | None = None
        self.message = ""
        self.changed = trio.Event()
        self.watchers = 0
        self.abandon_token = 0
        self.action: re_pb2.Action | None = None
        self.command: re_pb2.Command | None = None
        self.platform: Mapping[str, str] = _NO_PROPERTIES
        self.requirements: Requirements | None = None
        self.kind_key = ""
        self.requested_timeout_s: float | None = None
        self.reservation = Reservation()
        self.exclusive = False
        self.ladder_step = 0
        self.kills = 0
        self.steps_tried: tuple[str, ...] = ()
        #: One line per memory kill, for the client's ExecuteResponse.message.
        self.kill_notes: tuple[str, ...] = ()
        self.retries = 0
        self.attempt = 0
        self.queued_at = time.time()
        self.lease: LeaseRecord | None = None
        self.ticket = 0
        #: What held it in the queue (``lre.snapshot.WaitReason`` values), over
        #: all its stays; ``wait_mark`` is its bucket's block count when it joined.
        self.waited_for: set[str] = set()
        self.wait_mark = 0
        self.bucket: Bucket | None = None
        #: The build it counts under for fair shares (set when first queued).
        self.build: Build | None = None
        self.dedup = False
        self.cached_snapshot: OperationSnapshot | None = None
        #: Run elsewhere by the route it was submitted with (``_routing``).
        self.away = False
        #: The scope of the route while it runs (cancelled when the operation ends).
        self.route_scope: trio.CancelScope | None = None

    def snapshot(self) -> OperationSnapshot:
        """The client's view (built once per change: ``notify`` drops it)."""
        snapshot = self.cached_snapshot
        if snapshot is not None:
            return snapshot
        snapshot = self.cached_snapshot = OperationSnapshot(
            name=self.name,
            stage=self.stage,
            action_key=self.key,
            done=self.done,
            result=self.result,
            cached_result=self.cached,
            error=self.error,
            message=self.message,
            queued_at=self.queued_at,
        )
        return snapshot

    def lease_for(
        self,
        lease_id: str,
        worker: WorkerInfo,
        reservation: Reservation,
        exclusive: bool,
        *,
        max_kills: int = 0,
    ) -> Lease:
        """The ``Lease`` of this operation's current attempt on ``worker``;
        ``max_kills`` is the policy's ``max_steps`` (0: no bound known)."""
        assert self.action is not None and self.command is not None
        return Lease(
            lease_id=lease_id,
            operation_name=self.name,
            worker_name=worker.name,
            action_key=self.key,
            action=self.action,
            command=self.command,
            platform=self.platform,
            reservation=reservation,
            exclusive=exclusive,
            attempt=self.attempt,
            ladder_step=self.ladder_step,
            timeout_s=self.requested_timeout_s or worker.default_timeout_s,
            queued_at=self.queued_at,
            request_info=self.request_info,
            kind_key=self.kind_key,
            do_not_cache=self.action.do_not_cache,
            skip_cache_lookup=self.skip_cache_lookup,
            inline_stdout=self.inline_stdout,
            inline_stderr=self.inline_stderr,
            inline_output_files=self.inline_output_files,
            memory_kills=self.kills,
            last_chance=max_kills > 0 and self.kills + 1 >= max_kills,
        )

    def notify(self) -> None:
        """Wake everyone waiting for a change of this operation (call after
        every change of what ``snapshot`` shows)."""
        self.cached_snapshot = None
        self.wake()

    def wake(self) -> None:
        """Wake the watchers without a change (a progress update): they get
        the same snapshot object again, so a stream can resend what it built
        for it instead of building it anew."""
        event, self.changed = self.changed, trio.Event()
        event.set()


@dataclass(eq=False, repr=False, slots=True)
class WorkerState:
    """A registered worker: what it holds and the event its ``lease`` call waits on."""

    info: WorkerInfo
    draining: bool = False
    registered: bool = True
    reserved: Reservation = field(default_factory=Reservation)
    leases: dict[str, LeaseRecord] = field(default_factory=dict)
    wake: trio.Event = field(default_factory=trio.Event)
    waiters: int = 0
    last_seen: float = field(default_factory=time.monotonic)

    def wake_up(self) -> None:
        """Wake the ``lease`` calls waiting on ``wake`` (nothing to do when none waits)."""
        if self.waiters:
            event, self.wake = self.wake, trio.Event()
            event.set()


@dataclass(eq=False, repr=False, slots=True)
class LeaseRecord:
    """A lease held by a worker for an operation."""

    lease: Lease
    op: OperationState
    worker: WorkerState
    started_at: float = field(default_factory=time.time)
