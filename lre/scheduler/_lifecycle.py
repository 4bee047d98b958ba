"""The state a scheduler's roles share and the lifecycle of its operations.

``OperationLifecycle`` holds the one operation registry (operations, dedup,
retention), the queue, the registered workers and their leases and the
counters, and moves an operation through its stages: queueing and
requeueing, completion (with its event and history record), cancellation,
progress ticks and the expiry of finished operations (``run``). The client
role is ``Scheduler`` (``_scheduler``), the worker role ``WorkerLeasing``
(``_worker_leasing``); both act on this state.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from collections.abc import Callable, Sequence
from types import MappingProxyType

import trio

from lre.cas import BlobStore, DirectoryReader
from lre.config import PropertyModification, SimpleSchedulerSpec
from lre.errors import Cancelled, DeadlineExceeded, LreError
from lre.proto import re_pb2
from lre.scheduler._events import EventHook, emit_event, exit_event, failure_event
from lre.scheduler._history import HistoryTap, RecordHook
from lre.scheduler._model import ActionKey, ResourcePolicy, Stage, WorkerInfo
from lre.scheduler._preparation import ActionChecker
from lre.scheduler._protocols import ActionResultReader, ReservationAdvisor
from lre.scheduler._queue import RunQueue
from lre.scheduler._records import LeaseRecord, OperationState, WorkerState
from lre.scheduler._statistics import completion_kind
from lre.scheduler._worker_health import WorkerHealth
from lre.snapshot import EventKind

_SWEEP_INTERVAL_S = 0.5


class OperationLifecycle:
    """Shared state and the operation lifecycle; the constructor of ``Scheduler``.

    - ``spec``: the ``simple`` scheduler config (property types, retention,
      retries, progress interval).
    - ``cas``: where the Action, Command and input tree must exist.
    - ``action_cache``: consulted before queueing unless ``skip_cache_lookup``.
    - ``modifications``: the ``property_modifier`` rules applied first.
    - ``resources``: cold memory, ladder, kill limit, global memory budget.
    - ``advisor``: learned reservations (optional).
    - ``available_memory``: returns the host's available memory in bytes; when
      given, an action does not start while it reserves more than that, unless
      nothing is running at all (so the queue always moves).
    - ``memory_frozen``: whether the memory control holds new starts now
      because it keeps actions frozen (what ``available_memory``'s veto is
      then called: ``WaitReason.FROZEN``, else ``HOST_MEMORY``).
    - ``detach_grace_s``: how long an unfinished operation with no watcher is
      kept before it is cancelled (a client may re-attach with WaitExecution).
    - ``on_event``: called synchronously with a ``SchedulerEvent`` for ladder
      kills and escalations, kernel OOM kills, failures, timeouts, unmatchable
      actions, backpressure and changes of a worker's health (never for
      successes); exceptions it raises are logged and ignored.
    - ``directories``: the reader of ``cas``'s Directory messages shared with
      the workers (the composition root passes one; one of its own if not).
    - ``on_record``: called synchronously for every operation that ends (the
      history) with a ``RecordBuilder``, a function that makes its
      ``lre.snapshot.ActionRecord`` (call it later, on any thread:
      ``lre.scheduler._history``); exceptions are logged.

    Raises ``ValueError`` when ``spec.progress_interval_s`` is not in (0, 30].
    """

    def __init__(
        self,
        spec: SimpleSchedulerSpec,
        *,
        cas: BlobStore,
        action_cache: ActionResultReader | None = None,
        modifications: Sequence[PropertyModification] = (),
        resources: ResourcePolicy | None = None,
        advisor: ReservationAdvisor | None = None,
        available_memory: Callable[[], int] | None = None,
        memory_frozen: Callable[[], bool] | None = None,
        detach_grace_s: float = 2.0,
        on_event: EventHook | None = None,
        directories: DirectoryReader | None = None,
        on_record: RecordHook | None = None,
    ) -> None:
        if not 0 < spec.progress_interval_s <= 30:
            raise ValueError(
                f"progress_interval_s: {spec.progress_interval_s} must be in (0, 30] "
                "(clients' keepalives expire otherwise)"
            )
        self._spec = spec
        self._action_cache = action_cache
        self._resources = resources or ResourcePolicy()
        self._advisor = advisor
        self._checker = ActionChecker(
            cas,
            MappingProxyType(dict(spec.supported_platform_properties)),
            modifications,
            self._resources,
            advisor,
            directories,
        )
        self._queue = RunQueue(
            self._resources,
            available_memory,
            memory_frozen,
            fair_share=spec.fair_share,
            clock=trio.current_time,
        )
        self._detach_grace_s = detach_grace_s
        self._on_event = on_event
        self._history = HistoryTap(on_record) if on_record is not None else None
        self._worker_health = WorkerHealth()
        self.progress_interval_s = float(spec.progress_interval_s)
        self._nursery: trio.Nursery | None = None
        self._ops: dict[str, OperationState] = {}
        self._dedup: dict[ActionKey, OperationState] = {}
        self._workers: dict[str, WorkerState] = {}
        self._leases: dict[str, LeaseRecord] = {}
        self._retained: deque[tuple[float, OperationState]] = deque()
        self._seq = itertools.count()
        self._lease_ids = itertools.count(1)
        self._stage_counts: Counter[Stage] = Counter()
        self._completions: Counter[str] = Counter()
        self._counters: Counter[str] = Counter()
        self._memory_reserved = 0
        self._running = 0

    # ================================================================ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled. On exit every unfinished operation is
        cancelled (its lease's cancel signal fires) so workers stop."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                next_tick = trio.current_time() + self.progress_interval_s
                while True:
                    await trio.sleep(min(_SWEEP_INTERVAL_S, self.progress_interval_s))
                    self._sweep()
                    if trio.current_time() >= next_tick:
                        next_tick = trio.current_time() + self.progress_interval_s
                        self._progress_tick()
                    if self._queue.vetoed:
                        self._queue.vetoed = False
                        self._wake_workers()
        finally:
            self._nursery = None
            for op in list(self._ops.values()):
                self._cancel(op, "lre is shutting down")

    # ================================================================ internals

    def _cancel(self, op: OperationState, reason: str) -> None:
        if op.done:
            return
        if op.lease is not None:
            op.lease.lease.cancel_signal.set(reason)
            self._counters["lease_cancellations"] += 1
        self._complete(op, error=Cancelled(f"operation {op.name}: {reason}"))

    def _worker_infos(self) -> list[WorkerInfo]:
        return [w.info for w in self._workers.values()]

    def _undedup(self, op: OperationState) -> None:
        if op.dedup:
            op.dedup = False
            if self._dedup.get(op.key) is op:
                del self._dedup[op.key]

    def _set_stage(self, op: OperationState, stage: Stage) -> None:
        op.cached_snapshot = None
        if op.away:  # not in the local counts
            op.stage = stage
            return
        self._stage_counts[op.stage] -= 1
        op.stage = stage
        if stage is not Stage.COMPLETED:
            self._stage_counts[stage] += 1

    def _complete(
        self,
        op: OperationState,
        *,
        result: re_pb2.ActionResult | None = None,
        cached: bool = False,
        error: LreError | None = None,
        message: str = "",
        worker: str | None = None,
        peak_rss_bytes: int | None = None,
        event: EventKind | None = None,
        gave_up: bool = False,
    ) -> None:
        """End ``op``. An error other than a cancellation is also an event:
        ``event`` when given, else TIMEOUT for ``DeadlineExceeded``, else
        FAILURE (not for an operation routed away: see ``_routing``); so is a
        command that exited non-zero (FAILURE naming the exit code).
        ``gave_up``: lre's memory control killed it for the last time (its
        ``result`` is the killed run's; it was not retried after that)."""
        if op.done:
            return
        if op.route_scope is not None:
            op.route_scope.cancel()
        self._queue.remove(op)
        self._set_stage(op, Stage.COMPLETED)
        op.done = True
        op.result = result
        op.cached = cached
        op.error = error
        if op.kill_notes:
            # shown by the client for this reply only (never stored in the result)
            retried = (
                ""
                if error is not None or gave_up
                else f"; retried, ran at ladder step {op.ladder_step}"
            )
            notes = "lre memory control: " + "; ".join(op.kill_notes) + retried
            message = f"{notes}. {message}" if message else notes
        op.message = message
        self._undedup(op)
        self._retained.append((trio.current_time() + self._spec.retain_completed_for_s, op))
        if op.away:
            op.notify()
            return
        kind = completion_kind(result=result, cached=cached, error=error)
        self._completions[kind] += 1
        if kind == "error" and error is not None:
            if event is None:
                timeout = isinstance(error, DeadlineExceeded)
                event = EventKind.TIMEOUT if timeout else EventKind.FAILURE
            if self._on_event is not None:
                emit_event(
                    self._on_event, failure_event(event, op, error, message, worker, peak_rss_bytes)
                )
        elif kind == "nonzero_exit" and result is not None and not gave_up and self._on_event:
            # A compile or test that failed: the client's failure, shown
            # beside lre's own (gave_up: the memory kill said it already).
            emit_event(self._on_event, exit_event(op, result.exit_code, worker, peak_rss_bytes))
        if self._history is not None:
            self._history.finished(op, error)
        op.notify()

    def _progress_tick(self) -> None:
        """Wake every watcher of an unfinished operation (progress update;
        nothing changed, so the cached snapshots stay)."""
        for op in self._ops.values():
            if not op.done:
                op.wake()

    def _sweep(self) -> None:
        now = trio.current_time()
        retained = self._retained
        while retained and retained[0][0] <= now:
            _, op = retained.popleft()
            if self._ops.get(op.name) is op:
                del self._ops[op.name]
        self._queue.sweep()

    def _enqueue(self, op: OperationState) -> None:
        self._queue.push(op)
        op.notify()
        self._wake_workers()

    def _requeue(self, op: OperationState) -> None:
        self._set_stage(op, Stage.QUEUED)
        self._enqueue(op)

    def _wake_workers(self) -> None:
        for state in self._workers.values():
            state.wake_up()
