"""The scheduler: operations, queue, matching, reservations and dedup over one state.

All methods run on the Trio thread. Three roles use it:

- clients (the Execution/Operations services): ``submit``, ``watch``,
  ``get_operation``, ``list_operations``, ``cancel``, ``delete``;
- workers (in-process): ``register_worker``, ``lease``, ``report``,
  ``heartbeat``, ``set_draining``, ``unregister_worker``;
- observers: ``statistics()``.

``run`` must be running (started with ``nursery.start``) for submissions to
progress; it owns the tasks that check caches and inputs and the expiry of
finished operations.

This module holds the one operation registry and lifecycle (stages, dedup,
watchers, cancellation, retention) and the outcome of leases (retries,
ladder kills). The queue and leasing are in ``_queue``, the checks before
queueing in ``_preparation``, reservation sizing in ``_sizing``; a wrapping
scheduler that runs some operations elsewhere routes them through
``_routing`` (they stay in this registry).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from types import MappingProxyType

import trio

from lre.cas import BlobStore, DirectoryReader
from lre.config import PropertyModification, SimpleSchedulerSpec
from lre.digest import Digest, resolve_digest_function
from lre.errors import (
    Cancelled,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    LreError,
    MissingBlobs,
    NotFound,
    Unavailable,
)
from lre.proto import re_pb2
from lre.scheduler._events import (
    EventHook,
    backpressure_event,
    emit_event,
    escalation_event,
    failure_event,
    kill_event,
    memory_kill_text,
    oom_event,
)
from lre.scheduler._history import HistoryTap, RecordHook
from lre.scheduler._lease import Lease
from lre.scheduler._matching import matches_statically
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
    WorkerInfo,
)
from lre.scheduler._names import new_operation_name, parse_operation_name
from lre.scheduler._preparation import ActionChecker
from lre.scheduler._protocols import ActionResultReader, ReservationAdvisor
from lre.scheduler._queue import RunQueue
from lre.scheduler._records import LeaseRecord, OperationState, WorkerState
from lre.scheduler._routing import Route, run_route
from lre.scheduler._sizing import escalate, record_usage
from lre.scheduler._statistics import SchedulerStatistics, collect_statistics, completion_kind
from lre.scheduler._watch import OperationWatch, attach_watcher, detach_watcher
from lre.scheduler._worker_health import WorkerHealth
from lre.snapshot import EventKind

log = logging.getLogger(__name__)

_SWEEP_INTERVAL_S = 0.5


class Scheduler:
    """See the module docstring.

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
    - ``on_record``: called synchronously with an ``lre.snapshot.ActionRecord``
      for every operation that ends (the history); exceptions are logged.

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
        self._queue = RunQueue(self._resources, available_memory, memory_frozen)
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

    # ================================================================ clients

    def submit(
        self,
        request: re_pb2.ExecuteRequest,
        *,
        request_info: RequestInfo | None = None,
        route: Route | None = None,
    ) -> OperationSnapshot:
        """Accept an Execute request and return its operation (stage CACHE_CHECK,
        or a later stage when it joined an identical operation in flight).
        A new operation is first handed to ``route`` when given (``_routing``).

        Only the request itself is validated here: ``InvalidArgument`` for a
        malformed digest or digest function, ``Unavailable`` when the scheduler
        is not running. Everything else (cache hit, missing blobs, unknown or
        unsatisfiable platform, too long a timeout) ends the operation and is
        seen through ``watch``.
        """
        if self._nursery is None:
            raise Unavailable("the scheduler is not running")
        digest = Digest.from_proto(request.action_digest, field="action_digest")
        function = resolve_digest_function(request.digest_function, digest.hash)
        key = ActionKey(request.instance_name, function, digest)
        self._counters["submitted"] += 1
        if not request.skip_cache_lookup:
            existing = self._dedup.get(key)
            if existing is not None and not existing.done:
                self._counters["dedup_hits"] += 1
                return existing.snapshot()
        op = OperationState(
            new_operation_name(request.instance_name),
            key,
            next(self._seq),
            request,
            request_info or RequestInfo(),
        )
        self._ops[op.name] = op
        self._stage_counts[Stage.CACHE_CHECK] += 1
        if not request.skip_cache_lookup:
            self._dedup[key] = op
            op.dedup = True
        self._nursery.start_soon(self._prepare, op, route)
        return op.snapshot()

    def watch(self, name: str) -> OperationWatch[OperationState]:
        """Updates of operation ``name`` (see ``OperationWatch``).

        Raises ``NotFound`` when no such operation exists (never existed,
        deleted, or finished longer ago than ``retain_completed_for_s``).
        """
        return OperationWatch(self, self._find(name))  # woken by _progress_tick

    def get_operation(self, name: str) -> OperationSnapshot:
        """The current state; ``NotFound`` like ``watch``."""
        return self._find(name).snapshot()

    def list_operations(self, instance_name: str | None = None) -> list[OperationSnapshot]:
        """Every known operation (live and retained), optionally of one instance,
        oldest first."""
        ops: Iterable[OperationState] = self._ops.values()
        if instance_name is not None:
            ops = (op for op in ops if op.key.instance_name == instance_name)
        return [op.snapshot() for op in sorted(ops, key=lambda op: op.seq)]

    def cancel(self, name: str) -> None:
        """Cancel operation ``name``: it ends with CANCELLED and a running
        action's lease is cancelled. Finished operations are left as they are.
        ``NotFound`` like ``watch``."""
        self._cancel(self._find(name), "cancelled by CancelOperation")

    def delete(self, name: str) -> None:
        """Forget operation ``name`` (it does not cancel it; a running action
        still finishes). ``NotFound`` like ``watch``."""
        op = self._find(name)
        del self._ops[op.name]

    def is_routed_away(self, name: str) -> bool:
        """Whether operation ``name`` runs (or ran) elsewhere, taken away by
        its route. ``NotFound`` like ``watch``."""
        return self._find(name).away

    async def why_unsatisfiable(self, key: ActionKey) -> str | None:
        """Why none of the registered workers can ever run the action ``key``
        names (its platform after the property modifications), or None,
        also when its Action or Command cannot be read (the check before
        queueing reports that)."""
        return await self._checker.why_unsatisfiable(key, self._worker_infos())

    # ================================================================ workers

    def register_worker(self, info: WorkerInfo) -> None:
        """Add a worker, or update the description of one already registered."""
        state = self._workers.get(info.name)
        if state is None:
            self._workers[info.name] = WorkerState(info)
        else:
            state.info = info
        self._queue.forget_worker(info.name)
        self._checker.workers_changed()
        self._wake_workers()

    def unregister_worker(self, name: str) -> None:
        """Remove a worker. Its running leases are cancelled and their
        operations requeued as infrastructure failures (retry budget applies);
        its pending ``lease`` calls raise ``Unavailable``. ``NotFound`` for an
        unknown worker."""
        state = self._worker(name)
        state.registered = False
        del self._workers[name]
        gone = self._worker_health.went_away(name, len(state.leases))
        if gone is not None:
            log.warning("%s", gone.message)
            emit_event(self._on_event, gone)
        for lease_id in list(state.leases):
            record = state.leases[lease_id]
            record.lease.cancel_signal.set(f"worker {name} unregistered")
            self._finish_lease(
                lease_id, InfrastructureFailure(Unavailable(f"worker {name} went away"))
            )
        self._queue.forget_worker(name)
        self._checker.workers_changed()
        state.wake_up()

    def set_draining(self, name: str, draining: bool) -> None:
        """A draining worker finishes what it holds and takes nothing new."""
        state = self._worker(name)
        state.draining = draining
        state.wake_up()

    def heartbeat(self, name: str) -> None:
        """Record that worker ``name`` is alive (shown in statistics)."""
        self._worker(name).last_seen = time.monotonic()

    async def lease(self, worker_name: str) -> Lease:
        """Wait for an action this worker can run now: its properties match,
        the reservation fits the worker's free capacity and the global memory
        budget, ``max_inflight`` is not reached, the worker is not draining.

        Raises ``NotFound`` for an unknown worker and ``Unavailable`` once the
        worker is unregistered. Cancelling the call takes nothing.
        """
        state = self._worker(worker_name)
        waited = False
        while True:
            if not state.registered:
                raise Unavailable(f"worker {worker_name} is unregistered")
            taken = self._queue.take(state, self._memory_reserved, self._running)
            if taken is not None:
                lease = self._start(state, *taken)
                if not waited:  # a waited call has already passed a checkpoint
                    await trio.lowlevel.cancel_shielded_checkpoint()
                return lease
            waited = True
            state.waiters += 1
            try:
                await state.wake.wait()
            finally:
                state.waiters -= 1

    def report(self, lease_id: str, outcome: Outcome) -> bool:
        """The worker's result for a lease; releases its reservation.

        - ``Completed``: the operation ends with the result (and its error,
          e.g. DeadlineExceeded with partial output);
        - ``InfrastructureFailure``: requeued up to ``max_job_retries`` times,
          then the operation ends with the error;
        - ``Backpressure``: requeued at its old position, no attempt counted;
        - ``MemoryExceeded``: requeued one ladder step up; after
          ``max_steps`` kills the operation ends with RESOURCE_EXHAUSTED.

        Returns False (and does nothing) for a lease that is no longer held,
        e.g. already reported or taken back when the worker unregistered.
        After a cancellation the outcome is ignored apart from releasing.
        """
        return self._finish_lease(lease_id, outcome)

    # ================================================================ observers

    def reserved(self) -> tuple[int, int, int]:
        """Reserved millicpus, reserved memory bytes and running leases, now (cheap)."""
        millicpus = sum(w.reserved.millicpus for w in self._workers.values())
        return millicpus, self._memory_reserved, self._running

    def statistics(self) -> SchedulerStatistics:
        """A frozen snapshot of queues, workers and counters."""
        return collect_statistics(
            workers=self._workers.values(),
            queued_by_platform=self._queue.queued_by_platform(),
            queued_by_reservation=self._queue.queued_by_reservation(),
            queued_next=self._queue.next_queued(10),
            stage_counts=self._stage_counts,
            completions=self._completions,
            counters=self._counters,
            operations=self._ops.values(),
            memory_reserved=self._memory_reserved,
            memory_budget=self._resources.memory_budget_bytes,
        )

    # ================================================================ internals: clients

    def _find(self, name: str) -> OperationState:
        op = self._ops.get(name)
        if op is None:
            parse_operation_name(name)  # NotFound for names lre never makes
            raise NotFound(
                f"operation {name!r}: not found (unknown, deleted, or finished more than "
                f"{self._spec.retain_completed_for_s:g} s ago)"
            )
        return op

    def _attach(self, op: OperationState) -> None:
        attach_watcher(op)

    def _snapshot(self, op: OperationState) -> OperationSnapshot:
        return op.snapshot()

    def _detach(self, op: OperationState) -> None:
        detach_watcher(
            op,
            self._detach_grace_s,
            self._nursery,
            lambda: self._cancel(op, "no client is watching it any more"),
        )

    def _cancel(self, op: OperationState, reason: str) -> None:
        if op.done:
            return
        if op.lease is not None:
            op.lease.lease.cancel_signal.set(reason)
            self._counters["lease_cancellations"] += 1
        self._complete(op, error=Cancelled(f"operation {op.name}: {reason}"))

    async def _prepare(self, op: OperationState, route: Route | None) -> None:
        try:
            if route is not None:
                await run_route(self, op, route)
            if not op.done and await self._prepare_inner(op):
                self._set_stage(op, Stage.QUEUED)
                self._enqueue(op)
        except LreError as exc:
            unmatchable = isinstance(exc, FailedPrecondition) and not isinstance(exc, MissingBlobs)
            event = EventKind.UNMATCHABLE if unmatchable else None
            self._complete(op, error=exc, event=event)
        except Exception:  # trio.Cancelled is a BaseException and passes through
            log.exception("preparing operation %s failed", op.name)
            self._complete(
                op,
                error=Internal(
                    f"action {op.key.action_digest}: lre failed while checking it (see lre's log)"
                ),
            )

    async def _prepare_inner(self, op: OperationState) -> bool:
        """True when ``op`` is ready to queue; False when it ended (cache hit,
        or finished meanwhile). Raises the ``LreError`` to end it with."""
        if not op.skip_cache_lookup and self._action_cache is not None:
            cached = await self._action_cache.get_result(op.key.action_digest)
            if op.done:
                return False
            if cached is not None:
                self._counters["cache_hits"] += 1
                self._complete(op, result=cached, cached=True)
                return False
        return await self._checker.check(op, self._worker_infos, self._undedup)

    def _worker_infos(self) -> list[WorkerInfo]:
        return [w.info for w in self._workers.values()]

    # ================================================================ internals: lifecycle

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
    ) -> None:
        """End ``op``. An error other than a cancellation is also an event:
        ``event`` when given, else TIMEOUT for ``DeadlineExceeded``, else
        FAILURE (not for an operation routed away: see ``_routing``)."""
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
            retried = "" if error is not None else f"; retried, ran at ladder step {op.ladder_step}"
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

    # ================================================================ internals: queue and leases

    def _enqueue(self, op: OperationState) -> None:
        self._queue.push(op)
        op.notify()
        self._wake_workers()

    def _requeue(self, op: OperationState) -> None:
        self._set_stage(op, Stage.QUEUED)
        self._enqueue(op)

    def _worker(self, name: str) -> WorkerState:
        state = self._workers.get(name)
        if state is None:
            raise NotFound(f"worker {name!r} is not registered")
        return state

    def _wake_workers(self) -> None:
        for state in self._workers.values():
            state.wake_up()

    def _start(
        self, state: WorkerState, op: OperationState, reservation: Reservation, exclusive: bool
    ) -> Lease:
        info = state.info
        op.attempt += 1
        lease = op.lease_for(f"{info.name}/{next(self._lease_ids)}", info, reservation, exclusive)
        record = LeaseRecord(lease, op, state)
        state.leases[lease.lease_id] = record
        self._leases[lease.lease_id] = record
        state.reserved = state.reserved + reservation
        self._memory_reserved += reservation.memory_bytes
        self._running += 1
        op.lease = record
        self._set_stage(op, Stage.EXECUTING)
        op.notify()
        return lease

    def _finish_lease(self, lease_id: str, outcome: Outcome) -> bool:
        record = self._leases.pop(lease_id, None)
        if record is None:
            return False
        lease, op, state = record.lease, record.op, record.worker
        state.leases.pop(lease_id, None)
        state.reserved = state.reserved - lease.reservation
        self._memory_reserved -= lease.reservation.memory_bytes
        self._running -= 1
        if op.lease is record:
            op.lease = None
        if self._history is not None:
            self._history.lease_ended(op, lease, outcome)
        self._wake_workers()
        if self._advisor is not None:
            record_usage(self._advisor, lease, outcome)
        # An operation that ended before its lease did was cancelled (by the
        # client, a lost watcher, shutdown): how the action stopped says
        # nothing about the worker.
        health = None if op.done else self._worker_health.observe(lease.worker_name, outcome)
        if health is not None:
            log.warning("%s", health.message)
            emit_event(self._on_event, health)
        if op.done:
            return True
        worker = lease.worker_name
        if isinstance(outcome, Completed):
            if outcome.oom_killed:
                peak = outcome.usage.peak_rss_bytes if outcome.usage else None
                oom = oom_event(op, lease, peak)
                log.warning("%s", oom.message)
                emit_event(self._on_event, oom)
            self._complete(
                op,
                result=outcome.result,
                error=outcome.error,
                message=outcome.message,
                worker=worker,
                peak_rss_bytes=outcome.usage.peak_rss_bytes if outcome.usage else None,
            )
        elif isinstance(outcome, InfrastructureFailure):
            op.retries += 1
            if op.retries > self._spec.max_job_retries:
                self._complete(
                    op,
                    error=outcome.error,
                    message=(
                        f"gave up after {op.attempt} attempt(s); "
                        f"last error: {outcome.error.message}"
                    ),
                    worker=worker,
                )
            else:
                self._counters["retries"] += 1
                self._requeue(op)
        elif isinstance(outcome, Backpressure):
            self._counters["backpressure"] += 1
            emit_event(self._on_event, backpressure_event(op, lease, outcome))
            op.attempt -= 1
            self._requeue(op)
        elif isinstance(outcome, MemoryExceeded):
            self._counters["ladder_kills"] += 1
            requirements = op.requirements
            matching = [
                w.info
                for w in self._workers.values()
                if requirements is not None and matches_statically(requirements, w.info)
            ]
            emit_event(self._on_event, kill_event(op, lease, outcome))
            error = escalate(op, lease, outcome, matching, self._resources)
            log.warning(
                "%s",
                memory_kill_text(op, lease, outcome, error),
                extra={
                    "kv": {
                        "mnemonic": op.request_info.action_mnemonic,
                        "target": op.request_info.target_id,
                        "peak_rss_bytes": outcome.peak_rss_bytes,
                        "reserved_bytes": lease.reservation.memory_bytes,
                        "step": lease.ladder_step,
                        "next_step": "" if error is not None else op.ladder_step,
                    }
                },
            )
            if error is not None:
                self._complete(
                    op, error=error, worker=worker, peak_rss_bytes=outcome.peak_rss_bytes
                )
            else:
                emit_event(self._on_event, escalation_event(op, lease, outcome))
                self._requeue(op)
        return True
