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

Queue order: lower ``execution_policy.priority`` runs sooner, as the REAPI
says (NativeLink does the opposite), FIFO within a priority. Operations that
need different resources wait in separate buckets; a worker takes the best
head among the buckets it can run right now, so a small action may overtake
a large one that does not fit yet (backfill).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from types import MappingProxyType, TracebackType
from typing import Any

import trio

from lre.cas import BlobStore, read_message
from lre.config._models import PropertyModification, SimpleSchedulerSpec
from lre.digest import Digest, resolve_digest_function
from lre.errors import (
    Cancelled,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    LreError,
    MissingBlobs,
    NotFound,
    ResourceExhausted,
    Unavailable,
)
from lre.proto import re_pb2
from lre.scheduler._inputs import DirectoryCache, find_missing_inputs
from lre.scheduler._kind import kind_key
from lre.scheduler._lease import Lease
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
from lre.scheduler._statistics import LeaseStatistics, SchedulerStatistics, WorkerStatistics
from lre.scheduler._units import memory_text

log = logging.getLogger(__name__)

_SWEEP_INTERVAL_S = 0.5


class _Operation:
    __slots__ = (
        "abandon_token",
        "action",
        "attempt",
        "bucket",
        "cached",
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
        "seq",
        "skip_cache_lookup",
        "stage",
        "steps_tried",
        "ticket",
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
        self.platform: MappingProxyType[str, str] = MappingProxyType({})
        self.requirements: Requirements | None = None
        self.kind_key = ""
        self.requested_timeout_s: float | None = None
        self.reservation = Reservation()
        self.exclusive = False
        self.ladder_step = 0
        self.kills = 0
        self.steps_tried: list[str] = []
        self.retries = 0
        self.attempt = 0
        self.queued_at = time.time()
        self.lease: _LeaseRecord | None = None
        self.ticket = 0
        self.bucket: _Bucket | None = None
        self.dedup = False


class _Bucket:
    """Queued operations that need the same thing, ordered by (priority, seq)."""

    __slots__ = (
        "exclusive",
        "heap",
        "key",
        "label",
        "live",
        "matches",
        "requirements",
        "timeout_s",
    )

    def __init__(
        self, key: tuple[Any, ...], requirements: Requirements, exclusive: bool, timeout_s: float
    ) -> None:
        self.key = key
        self.requirements = requirements
        self.exclusive = exclusive
        self.timeout_s = timeout_s
        self.heap: list[tuple[int, int, int, _Operation]] = []
        self.live = 0
        self.matches: dict[str, bool] = {}
        self.label = requirements.label() + (",exclusive" if exclusive else "")

    def head(self) -> tuple[int, int, int, _Operation] | None:
        heap = self.heap
        while heap:
            entry = heap[0]
            op = entry[3]
            if op.ticket == entry[2] and op.bucket is self:
                return entry
            heapq.heappop(heap)
        return None


class _WorkerState:
    __slots__ = ("draining", "info", "last_seen", "leases", "registered", "reserved", "wake")

    def __init__(self, info: WorkerInfo) -> None:
        self.info = info
        self.draining = False
        self.registered = True
        self.reserved = Reservation()
        self.leases: dict[str, _LeaseRecord] = {}
        self.wake = trio.Event()
        self.last_seen = time.monotonic()


class _LeaseRecord:
    __slots__ = ("lease", "op", "started_at", "worker")

    def __init__(self, lease: Lease, op: _Operation, worker: _WorkerState) -> None:
        self.lease = lease
        self.op = op
        self.worker = worker
        self.started_at = time.time()


class OperationWatch:
    """Updates of one operation, as an async context manager and iterator::

        async with scheduler.watch(name) as updates:
            async for snapshot in updates:
                ...

    The first iteration yields the current state at once; later ones yield
    after every change, and at least every ``progress_interval_s`` while the
    operation waits or runs (the same state again). Iteration ends after the
    snapshot with ``done``. Leaving the ``async with`` detaches the watcher;
    when the last watcher of an unfinished operation leaves, the operation is
    cancelled after the scheduler's ``detach_grace_s``.
    """

    __slots__ = ("_entered", "_event", "_finished", "_first", "_op", "_scheduler")

    def __init__(self, scheduler: Scheduler, op: _Operation) -> None:
        self._scheduler = scheduler
        self._op = op
        self._first = True
        self._finished = False
        self._entered = False
        self._event = op.changed

    async def __aenter__(self) -> OperationWatch:
        self._scheduler._attach(self._op)
        self._entered = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._entered:
            self._entered = False
            self._scheduler._detach(self._op)

    def __aiter__(self) -> OperationWatch:
        return self

    async def __anext__(self) -> OperationSnapshot:
        if not self._entered:
            raise RuntimeError("iterate an OperationWatch inside 'async with'")
        if self._finished:
            raise StopAsyncIteration
        if self._first:
            self._first = False
            await trio.lowlevel.checkpoint()
        else:
            # Woken by a change, or by the scheduler's progress tick (every
            # progress_interval_s for every unfinished operation): no timer per
            # watcher.
            await self._event.wait()
        op = self._op
        self._event = op.changed
        snapshot = self._scheduler._snapshot(op)
        if snapshot.done:
            self._finished = True
        return snapshot


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
    - ``detach_grace_s``: how long an unfinished operation with no watcher is
      kept before it is cancelled (a client may re-attach with WaitExecution).
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
        detach_grace_s: float = 2.0,
    ) -> None:
        if not 0 < spec.progress_interval_s <= 30:
            raise ValueError(
                f"progress_interval_s: {spec.progress_interval_s} must be in (0, 30] "
                "(clients' keepalives expire otherwise)"
            )
        self._spec = spec
        self._types = MappingProxyType(dict(spec.supported_platform_properties))
        self._cas = cas
        self._action_cache = action_cache
        self._modifications = tuple(modifications)
        self._resources = resources or ResourcePolicy()
        self._advisor = advisor
        self._available_memory = available_memory
        self._detach_grace_s = detach_grace_s
        self.progress_interval_s = float(spec.progress_interval_s)
        self._nursery: trio.Nursery | None = None
        self._ops: dict[str, _Operation] = {}
        self._dedup: dict[ActionKey, _Operation] = {}
        self._buckets: dict[tuple[Any, ...], _Bucket] = {}
        self._workers: dict[str, _WorkerState] = {}
        self._leases: dict[str, _LeaseRecord] = {}
        self._retained: deque[tuple[float, _Operation]] = deque()
        self._seq = itertools.count()
        self._lease_ids = itertools.count(1)
        self._directories = DirectoryCache()
        self._stage_counts: Counter[Stage] = Counter()
        self._completions: Counter[str] = Counter()
        self._counters: Counter[str] = Counter()
        self._memory_reserved = 0
        self._running = 0
        self._vetoed = False

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
                    if self._vetoed:
                        self._vetoed = False
                        self._wake_workers()
        finally:
            self._nursery = None
            for op in list(self._ops.values()):
                self._cancel(op, "lre is shutting down")

    # ================================================================ clients

    def submit(
        self, request: re_pb2.ExecuteRequest, *, request_info: RequestInfo | None = None
    ) -> OperationSnapshot:
        """Accept an Execute request and return its operation (stage CACHE_CHECK,
        or a later stage when it joined an identical operation in flight).

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
                return self._snapshot(existing)
        op = _Operation(
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
        self._nursery.start_soon(self._prepare, op)
        return self._snapshot(op)

    def watch(self, name: str) -> OperationWatch:
        """Updates of operation ``name`` (see ``OperationWatch``).

        Raises ``NotFound`` when no such operation exists (never existed,
        deleted, or finished longer ago than ``retain_completed_for_s``).
        """
        return OperationWatch(self, self._find(name))

    def get_operation(self, name: str) -> OperationSnapshot:
        """The current state; ``NotFound`` like ``watch``."""
        return self._snapshot(self._find(name))

    def list_operations(self, instance_name: str | None = None) -> list[OperationSnapshot]:
        """Every known operation (live and retained), optionally of one instance,
        oldest first."""
        ops: Iterable[_Operation] = self._ops.values()
        if instance_name is not None:
            ops = (op for op in ops if op.key.instance_name == instance_name)
        return [self._snapshot(op) for op in sorted(ops, key=lambda op: op.seq)]

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

    # ================================================================ workers

    def register_worker(self, info: WorkerInfo) -> None:
        """Add a worker, or update the description of one already registered."""
        state = self._workers.get(info.name)
        if state is None:
            self._workers[info.name] = _WorkerState(info)
        else:
            state.info = info
        for bucket in self._buckets.values():
            bucket.matches.pop(info.name, None)
        self._wake_workers()

    def unregister_worker(self, name: str) -> None:
        """Remove a worker. Its running leases are cancelled and their
        operations requeued as infrastructure failures (retry budget applies);
        its pending ``lease`` calls raise ``Unavailable``."""
        state = self._worker(name)
        state.registered = False
        del self._workers[name]
        for lease_id in list(state.leases):
            record = state.leases[lease_id]
            record.lease.cancel_signal.set(f"worker {name} unregistered")
            self._finish_lease(
                lease_id, InfrastructureFailure(Unavailable(f"worker {name} went away"))
            )
        for bucket in self._buckets.values():
            bucket.matches.pop(name, None)
        self._wake(state)

    def set_draining(self, name: str, draining: bool) -> None:
        """A draining worker finishes what it holds and takes nothing new."""
        state = self._worker(name)
        state.draining = draining
        self._wake(state)

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
        while True:
            if not state.registered:
                raise Unavailable(f"worker {worker_name} is unregistered")
            lease = self._take(state)
            if lease is not None:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return lease
            await state.wake.wait()

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

    def statistics(self) -> SchedulerStatistics:
        """A frozen snapshot of queues, workers and counters."""
        by_platform: Counter[str] = Counter()
        for bucket in self._buckets.values():
            if bucket.live:
                by_platform[bucket.label] += bucket.live
        workers = []
        capacity_cpu = capacity_mem = reserved_cpu = 0
        for state in self._workers.values():
            capacity_cpu += state.info.capacity.millicpus
            capacity_mem += state.info.capacity.memory_bytes
            reserved_cpu += state.reserved.millicpus
            leases = tuple(
                LeaseStatistics(
                    operation_name=r.op.name,
                    action_hash=r.op.key.action_digest.hash,
                    kind_key=r.lease.kind_key,
                    mnemonic=r.lease.request_info.action_mnemonic,
                    target_id=r.lease.request_info.target_id,
                    reservation=r.lease.reservation,
                    exclusive=r.lease.exclusive,
                    attempt=r.lease.attempt,
                    ladder_step=r.lease.ladder_step,
                    started_at=r.started_at,
                    cancelled=r.lease.cancelled,
                )
                for r in state.leases.values()
            )
            workers.append(
                WorkerStatistics(
                    name=state.info.name,
                    draining=state.draining,
                    capacity=state.info.capacity,
                    reserved=state.reserved,
                    inflight=len(state.leases),
                    max_inflight=state.info.max_inflight,
                    leases=leases,
                )
            )
        counters = self._counters
        return SchedulerStatistics(
            by_stage=MappingProxyType(
                {
                    stage.name: self._stage_counts[stage]
                    for stage in (Stage.CACHE_CHECK, Stage.QUEUED, Stage.EXECUTING)
                }
            ),
            queued_by_platform=MappingProxyType(dict(by_platform)),
            workers=tuple(workers),
            completions=MappingProxyType(dict(self._completions)),
            submitted=counters["submitted"],
            cache_hits=counters["cache_hits"],
            dedup_hits=counters["dedup_hits"],
            retries=counters["retries"],
            backpressure_requeues=counters["backpressure"],
            ladder_kills=counters["ladder_kills"],
            lease_cancellations=counters["lease_cancellations"],
            watchers=sum(op.watchers for op in self._ops.values()),
            retained_operations=len(self._ops),
            memory_reserved_bytes=self._memory_reserved,
            memory_capacity_bytes=capacity_mem,
            memory_budget_bytes=self._resources.memory_budget_bytes,
            millicpus_reserved=reserved_cpu,
            millicpus_capacity=capacity_cpu,
        )

    # ================================================================ internals: clients

    def _find(self, name: str) -> _Operation:
        op = self._ops.get(name)
        if op is None:
            parse_operation_name(name)  # NotFound for names lre never makes
            raise NotFound(
                f"operation {name!r}: not found (unknown, deleted, or finished more than "
                f"{self._spec.retain_completed_for_s:g} s ago)"
            )
        return op

    def _snapshot(self, op: _Operation) -> OperationSnapshot:
        return OperationSnapshot(
            name=op.name,
            stage=op.stage,
            action_key=op.key,
            done=op.done,
            result=op.result,
            cached_result=op.cached,
            error=op.error,
            message=op.message,
            queued_at=op.queued_at,
        )

    def _attach(self, op: _Operation) -> None:
        op.watchers += 1
        op.abandon_token += 1

    def _detach(self, op: _Operation) -> None:
        op.watchers -= 1
        if op.watchers > 0 or op.done:
            return
        op.abandon_token += 1
        if self._detach_grace_s <= 0 or self._nursery is None:
            self._cancel(op, "no client is watching it any more")
        else:
            self._nursery.start_soon(self._abandon_later, op, op.abandon_token)

    async def _abandon_later(self, op: _Operation, token: int) -> None:
        await trio.sleep(self._detach_grace_s)
        if op.abandon_token == token and op.watchers == 0 and not op.done:
            self._cancel(op, "no client is watching it any more")

    def _cancel(self, op: _Operation, reason: str) -> None:
        if op.done:
            return
        if op.lease is not None:
            op.lease.lease.cancel_signal.set(reason)
            self._counters["lease_cancellations"] += 1
        self._complete(op, error=Cancelled(f"operation {op.name}: {reason}"))

    async def _prepare(self, op: _Operation) -> None:
        try:
            await self._prepare_inner(op)
        except LreError as exc:
            self._complete(op, error=exc)
        except Exception:  # trio.Cancelled is a BaseException and passes through
            log.exception("preparing operation %s failed", op.name)
            self._complete(
                op,
                error=Internal(
                    f"action {op.key.action_digest}: lre failed while checking it (see lre's log)"
                ),
            )

    async def _prepare_inner(self, op: _Operation) -> None:
        key = op.key
        if not op.skip_cache_lookup and self._action_cache is not None:
            cached = await self._action_cache.get_result(key.action_digest)
            if op.done:
                return
            if cached is not None:
                self._counters["cache_hits"] += 1
                self._complete(op, result=cached, cached=True)
                return
        try:
            action = await read_message(self._cas, key.action_digest, re_pb2.Action)
        except NotFound:
            raise MissingBlobs([key.action_digest.subject]) from None
        if op.done:
            return
        if action.do_not_cache and op.dedup:
            self._undedup(op)
        command_digest = Digest.from_proto(action.command_digest, field="action.command_digest")
        input_root = Digest.from_proto(action.input_root_digest, field="action.input_root_digest")
        missing = await find_missing_inputs(
            self._cas, command_digest, input_root, self._directories
        )
        if op.done:
            return
        if missing:
            raise MissingBlobs([d.subject for d in missing])
        try:
            command = await read_message(self._cas, command_digest, re_pb2.Command)
        except NotFound:
            raise MissingBlobs([command_digest.subject]) from None
        if op.done:
            return
        platform = apply_modifications(platform_of(action, command), self._modifications)
        requirements = requirements_of(platform, self._types)
        infos = [w.info for w in self._workers.values()]
        why = explain_unsatisfiable(requirements, infos)
        if why is not None:
            raise FailedPrecondition(f"action {key.action_digest}: {why}")
        matching = [w for w in infos if matches_statically(requirements, w)]
        timeout_s: float | None = None
        if action.HasField("timeout"):
            asked = action.timeout.seconds + action.timeout.nanos / 1e9
            if asked < 0:
                raise InvalidArgument(f"Action.timeout: {asked:g} s is negative")
            if asked > 0:
                longest = max(w.max_action_timeout_s for w in matching)
                if asked > longest:
                    raise InvalidArgument(
                        f"Action.timeout: {asked:g} s is longer than the maximum "
                        f"{longest:g} s (max_action_timeout_s of the workers that match)"
                    )
                timeout_s = asked
        op.action = action
        op.command = command
        op.platform = MappingProxyType(platform)
        op.requirements = requirements
        op.requested_timeout_s = timeout_s
        op.kind_key = kind_key(op.request_info, command)
        self._size_initial(op, requirements, matching)
        self._set_stage(op, Stage.QUEUED)
        self._enqueue(op)

    def _size_initial(
        self, op: _Operation, requirements: Requirements, matching: Sequence[WorkerInfo]
    ) -> None:
        asked = requirements.reservation
        millicpus, memory, step = asked.millicpus, asked.memory_bytes, 0
        learned = None
        if self._advisor is not None:
            try:
                learned = self._advisor.lookup(op.kind_key)
            except Exception:
                log.exception("reservation advisor lookup failed for %s", op.kind_key)
        if learned is not None:
            millicpus = max(millicpus, learned[0])
            memory = max(memory, learned[1])
            step = max(0, learned[2])
        else:
            memory = max(memory, self._resources.cold_memory_bytes)
        largest_cpu = max(w.capacity.millicpus for w in matching)
        largest_mem = self._memory_ceiling(matching)
        if asked.memory_bytes > largest_mem:
            raise FailedPrecondition(
                f"action {op.key.action_digest}: platform property memory_kb="
                f"{asked.memory_bytes // 1024} is more than the memory budget "
                f"({memory_text(largest_mem)})"
            )
        op.reservation = Reservation(
            max(asked.millicpus, min(millicpus, largest_cpu)),
            min(memory, largest_mem),
            asked.extra,
        )
        if step > 0:
            self._move_to_step(op, step, matching)

    def _memory_ceiling(self, matching: Sequence[WorkerInfo]) -> int:
        ceiling = max(w.capacity.memory_bytes for w in matching)
        budget = self._resources.memory_budget_bytes
        return ceiling if budget is None else min(ceiling, budget)

    def _move_to_step(self, op: _Operation, step: int, matching: Sequence[WorkerInfo]) -> None:
        ladder = self._resources.ladder
        ceiling = self._memory_ceiling(matching)
        if step <= len(ladder) and ladder[step - 1] <= ceiling:
            op.ladder_step = step
            memory = max(op.reservation.memory_bytes, ladder[step - 1])
            op.reservation = Reservation(op.reservation.millicpus, memory, op.reservation.extra)
        else:
            op.ladder_step = len(ladder) + 1
            op.exclusive = True

    def _undedup(self, op: _Operation) -> None:
        if op.dedup:
            op.dedup = False
            if self._dedup.get(op.key) is op:
                del self._dedup[op.key]

    def _set_stage(self, op: _Operation, stage: Stage) -> None:
        self._stage_counts[op.stage] -= 1
        op.stage = stage
        if stage is not Stage.COMPLETED:
            self._stage_counts[stage] += 1

    def _notify(self, op: _Operation) -> None:
        event, op.changed = op.changed, trio.Event()
        event.set()

    def _complete(
        self,
        op: _Operation,
        *,
        result: re_pb2.ActionResult | None = None,
        cached: bool = False,
        error: LreError | None = None,
        message: str = "",
    ) -> None:
        if op.done:
            return
        if op.bucket is not None:
            op.bucket.live -= 1
            op.bucket = None
            op.ticket += 1
        self._set_stage(op, Stage.COMPLETED)
        op.done = True
        op.result = result
        op.cached = cached
        op.error = error
        op.message = message
        self._undedup(op)
        if cached:
            kind = "cached"
        elif isinstance(error, Cancelled):
            kind = "cancelled"
        elif error is not None:
            kind = "error"
        elif result is not None and result.exit_code != 0:
            kind = "nonzero_exit"
        else:
            kind = "success"
        self._completions[kind] += 1
        self._retained.append((trio.current_time() + self._spec.retain_completed_for_s, op))
        self._notify(op)

    def _progress_tick(self) -> None:
        """Wake every watcher of an unfinished operation (progress update)."""
        for op in self._ops.values():
            if not op.done:
                self._notify(op)

    def _sweep(self) -> None:
        now = trio.current_time()
        retained = self._retained
        while retained and retained[0][0] <= now:
            _, op = retained.popleft()
            if self._ops.get(op.name) is op:
                del self._ops[op.name]
        for key in [k for k, b in self._buckets.items() if b.live == 0]:
            del self._buckets[key]

    # ================================================================ internals: queue

    def _enqueue(self, op: _Operation) -> None:
        requirements = op.requirements
        assert requirements is not None
        r = op.reservation
        timeout = op.requested_timeout_s or 0.0
        key = (
            requirements.exact,
            requirements.present,
            r.millicpus,
            r.memory_bytes,
            tuple(sorted(r.extra.items())),
            op.exclusive,
            timeout,
        )
        bucket = self._buckets.get(key)
        if bucket is None:
            sized = Requirements(requirements.exact, requirements.present, r)
            bucket = self._buckets[key] = _Bucket(key, sized, op.exclusive, timeout)
        op.ticket += 1
        op.bucket = bucket
        bucket.live += 1
        heapq.heappush(bucket.heap, (op.priority, op.seq, op.ticket, op))
        self._notify(op)
        self._wake_workers()

    def _worker(self, name: str) -> _WorkerState:
        state = self._workers.get(name)
        if state is None:
            raise NotFound(f"worker {name!r} is not registered")
        return state

    def _wake(self, state: _WorkerState) -> None:
        event, state.wake = state.wake, trio.Event()
        event.set()

    def _wake_workers(self) -> None:
        for state in self._workers.values():
            self._wake(state)

    def _take(self, state: _WorkerState) -> Lease | None:
        info = state.info
        if state.draining:
            return None
        if info.max_inflight and len(state.leases) >= info.max_inflight:
            return None
        free = info.capacity - state.reserved
        budget = self._resources.memory_budget_bytes
        budget_free = math.inf if budget is None else budget - self._memory_reserved
        available: float | None = None
        best: _Bucket | None = None
        best_order: tuple[int, int] | None = None
        best_memory = 0
        for bucket in self._buckets.values():
            head = bucket.head()
            if head is None:
                continue
            order = (head[0], head[1])
            if best_order is not None and order >= best_order:
                continue
            matches = bucket.matches.get(info.name)
            if matches is None:
                matches = matches_statically(bucket.requirements, info) and (
                    bucket.timeout_s <= info.max_action_timeout_s
                )
                bucket.matches[info.name] = matches
            if not matches:
                continue
            if bucket.exclusive:
                if state.leases or (budget is not None and self._memory_reserved > 0):
                    continue
                memory = min(info.capacity.memory_bytes, budget or info.capacity.memory_bytes)
            else:
                reservation = bucket.requirements.reservation
                if not reservation.fits_in(free):
                    continue
                memory = reservation.memory_bytes
                if memory > budget_free:
                    continue
            if memory and self._available_memory is not None and self._running > 0:
                if available is None:
                    available = float(self._available_memory())
                if memory > available:
                    self._vetoed = True
                    continue
            best, best_order, best_memory = bucket, order, memory
        if best is None:
            return None
        entry = heapq.heappop(best.heap)
        op = entry[3]
        best.live -= 1
        op.bucket = None
        op.ticket += 1
        if best.exclusive:
            reservation = Reservation(info.capacity.millicpus, best_memory, info.capacity.extra)
        else:
            reservation = best.requirements.reservation
        return self._start(op, state, reservation, best.exclusive)

    def _start(
        self, op: _Operation, state: _WorkerState, reservation: Reservation, exclusive: bool
    ) -> Lease:
        assert op.action is not None and op.command is not None
        info = state.info
        op.attempt += 1
        lease = Lease(
            lease_id=f"{info.name}/{next(self._lease_ids)}",
            operation_name=op.name,
            worker_name=info.name,
            action_key=op.key,
            action=op.action,
            command=op.command,
            platform=op.platform,
            reservation=reservation,
            exclusive=exclusive,
            attempt=op.attempt,
            ladder_step=op.ladder_step,
            timeout_s=op.requested_timeout_s or info.default_timeout_s,
            queued_at=op.queued_at,
            request_info=op.request_info,
            kind_key=op.kind_key,
            do_not_cache=op.action.do_not_cache,
            skip_cache_lookup=op.skip_cache_lookup,
            inline_stdout=op.inline_stdout,
            inline_stderr=op.inline_stderr,
            inline_output_files=op.inline_output_files,
        )
        record = _LeaseRecord(lease, op, state)
        state.leases[lease.lease_id] = record
        self._leases[lease.lease_id] = record
        state.reserved = state.reserved + reservation
        self._memory_reserved += reservation.memory_bytes
        self._running += 1
        op.lease = record
        self._set_stage(op, Stage.EXECUTING)
        self._notify(op)
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
        self._wake_workers()
        self._learn(lease, outcome)
        if op.done:
            return True
        if isinstance(outcome, Completed):
            self._complete(op, result=outcome.result, error=outcome.error, message=outcome.message)
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
                )
            else:
                self._counters["retries"] += 1
                self._requeue(op)
        elif isinstance(outcome, Backpressure):
            self._counters["backpressure"] += 1
            op.attempt -= 1
            self._requeue(op)
        elif isinstance(outcome, MemoryExceeded):
            self._ladder_kill(op, lease, outcome)
        return True

    def _learn(self, lease: Lease, outcome: Outcome) -> None:
        if self._advisor is None:
            return
        usage: Usage | None = None
        if isinstance(outcome, Completed | MemoryExceeded):
            usage = outcome.usage
        if isinstance(outcome, MemoryExceeded):
            peak = max(outcome.peak_rss_bytes, usage.peak_rss_bytes if usage else 0)
            average = usage.average_millicpus if usage else 0
        elif usage is not None:
            peak, average = usage.peak_rss_bytes, usage.average_millicpus
        else:
            return
        try:
            self._advisor.record(lease.kind_key, peak, average, lease.ladder_step)
        except Exception:
            log.exception("reservation advisor record failed for %s", lease.kind_key)

    def _ladder_kill(self, op: _Operation, lease: Lease, outcome: MemoryExceeded) -> None:
        self._counters["ladder_kills"] += 1
        op.attempt -= 1  # not a retry: the next run keeps this attempt number
        op.kills += 1
        op.steps_tried.append(
            "whole worker" if lease.exclusive else memory_text(lease.reservation.memory_bytes)
        )
        if op.kills >= self._resources.max_steps:
            self._complete(
                op,
                error=ResourceExhausted(
                    f"action {op.key.action_digest} was killed {op.kills} time(s) for "
                    f"exceeding its memory reservation; peak RSS "
                    f"{memory_text(outcome.peak_rss_bytes)}; steps tried: "
                    + ", ".join(op.steps_tried)
                ),
            )
            return
        if not op.exclusive:
            floor = max(lease.reservation.memory_bytes, outcome.peak_rss_bytes)
            ladder = self._resources.ladder
            step = next(
                (i for i, amount in enumerate(ladder, 1) if i > op.ladder_step and amount > floor),
                len(ladder) + 1,
            )
            matching = [
                w.info
                for w in self._workers.values()
                if op.requirements is not None and matches_statically(op.requirements, w.info)
            ]
            if matching:
                self._move_to_step(op, step, matching)
            else:
                op.ladder_step, op.exclusive = len(ladder) + 1, True
        self._requeue(op)

    def _requeue(self, op: _Operation) -> None:
        self._set_stage(op, Stage.QUEUED)
        self._enqueue(op)
