"""The scheduler: operations, queue, matching, reservations and dedup.

All methods run on the Trio thread. Three roles use it:

- clients (the Execution/Operations services): ``submit``, ``watch``,
  ``get_operation``, ``list_operations``, ``cancel``, ``delete``;
- workers (in-process): ``register_worker``, ``lease``, ``report``,
  ``heartbeat``, ``set_draining``, ``unregister_worker``;
- observers: ``statistics()``.

``run`` must be running (started with ``nursery.start``) for submissions to
progress; it owns the tasks that check caches and inputs and the expiry of
finished operations.

``Scheduler`` composes the parts that own the state: ``Operations``
(``_operations``: the registry and lifecycle of operations, dedup,
retention, watches), ``WorkerLeasing`` (``_worker_leasing``: workers, leases
and their outcomes), the ``RunQueue`` between them (``_queue``) and the
checks before queueing (``_preparation``; reservations sized by
``_sizing``). A wrapping scheduler that runs some operations elsewhere
routes them through ``_routing`` (they stay in this registry).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from types import MappingProxyType

import trio

from lre.cas import BlobStore, DirectoryReader
from lre.config import PropertyModification, SimpleSchedulerSpec
from lre.digest import Digest, resolve_digest_function
from lre.errors import FailedPrecondition, Internal, LreError, MissingBlobs, Unavailable
from lre.proto import re_pb2
from lre.scheduler._events import EventHook
from lre.scheduler._history import HistoryTap, RecordHook
from lre.scheduler._lease import Lease
from lre.scheduler._model import (
    ActionKey,
    OperationSnapshot,
    Outcome,
    RequestInfo,
    ResourcePolicy,
    WorkerInfo,
)
from lre.scheduler._operations import Operations
from lre.scheduler._preparation import ActionChecker
from lre.scheduler._protocols import ActionResultReader, ReservationAdvisor
from lre.scheduler._queue import RunQueue
from lre.scheduler._records import OperationState
from lre.scheduler._routing import Route, run_route
from lre.scheduler._statistics import SchedulerStatistics, build_statistics, collect_statistics
from lre.scheduler._watch import OperationWatch
from lre.scheduler._worker_leasing import WorkerLeasing
from lre.snapshot import EventKind

log = logging.getLogger(__name__)

_SWEEP_INTERVAL_S = 0.5


class Scheduler:
    """See the module docstring. The constructor's parameters:

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
        self._action_cache = action_cache
        self._resources = resources or ResourcePolicy()
        self._history = HistoryTap(on_record) if on_record is not None else None
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
        self._operations = Operations(
            self._queue,
            wake_workers=self._wake_workers,
            retain_s=float(spec.retain_completed_for_s),
            detach_grace_s=detach_grace_s,
            on_event=on_event,
            history=self._history,
        )
        self._leasing = WorkerLeasing(
            self._operations,
            self._queue,
            self._resources,
            max_job_retries=spec.max_job_retries,
            workers_changed=self._checker.workers_changed,
            advisor=advisor,
            on_event=on_event,
            history=self._history,
        )
        self.progress_interval_s = float(spec.progress_interval_s)
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled. On exit every unfinished operation is
        cancelled (its lease's cancel signal fires) so workers stop."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = self._operations.nursery = nursery
                task_status.started()
                next_tick = trio.current_time() + self.progress_interval_s
                while True:
                    await trio.sleep(min(_SWEEP_INTERVAL_S, self.progress_interval_s))
                    self._operations.sweep()
                    self._queue.sweep()
                    if trio.current_time() >= next_tick:
                        next_tick = trio.current_time() + self.progress_interval_s
                        self._operations.tick()
                    if self._queue.vetoed:
                        self._queue.vetoed = False
                        self._wake_workers()
        finally:
            self._nursery = self._operations.nursery = None
            self._operations.cancel_all("lre is shutting down")

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
        op, new = self._operations.add(request, key, request_info or RequestInfo())
        if new:
            self._nursery.start_soon(self._prepare, op, route)
        return op.snapshot()

    def watch(self, name: str) -> OperationWatch:
        """Updates of operation ``name`` (see ``OperationWatch``).

        Raises ``NotFound`` when no such operation exists (never existed,
        deleted, or finished longer ago than ``retain_completed_for_s``).
        """
        op = self._operations.find(name)
        return OperationWatch(op, lambda: self._operations.detach(op))

    def get_operation(self, name: str) -> OperationSnapshot:
        """The current state; ``NotFound`` like ``watch``."""
        return self._operations.find(name).snapshot()

    def list_operations(self, instance_name: str | None = None) -> list[OperationSnapshot]:
        """Every known operation (live and retained), optionally of one instance,
        oldest first."""
        ops = self._operations.all()
        if instance_name is not None:
            ops = [op for op in ops if op.key.instance_name == instance_name]
        return [op.snapshot() for op in sorted(ops, key=lambda op: op.seq)]

    def cancel(self, name: str) -> None:
        """Cancel operation ``name``: it ends with CANCELLED and a running
        action's lease is cancelled. Finished operations are left as they are.
        ``NotFound`` like ``watch``."""
        operations = self._operations
        operations.cancel(operations.find(name), "cancelled by CancelOperation")

    def delete(self, name: str) -> None:
        """Forget operation ``name`` (it does not cancel it; a running action
        still finishes). ``NotFound`` like ``watch``."""
        self._operations.forget(name)

    def is_routed_away(self, name: str) -> bool:
        """Whether operation ``name`` runs (or ran) elsewhere, taken away by
        its route. ``NotFound`` like ``watch``."""
        return self._operations.find(name).away

    async def why_unsatisfiable(self, key: ActionKey) -> str | None:
        """Why none of the registered workers can ever run the action ``key``
        names (its platform after the property modifications), or None,
        also when its Action or Command cannot be read (the check before
        queueing reports that)."""
        return await self._checker.why_unsatisfiable(key, self._leasing.worker_infos())

    # ================================================================ workers (``WorkerLeasing``)

    def register_worker(self, info: WorkerInfo) -> None:
        self._leasing.register_worker(info)

    def unregister_worker(self, name: str) -> None:
        self._leasing.unregister_worker(name)

    def set_draining(self, name: str, draining: bool) -> None:
        self._leasing.set_draining(name, draining)

    def heartbeat(self, name: str) -> None:
        self._leasing.heartbeat(name)

    async def lease(self, worker_name: str) -> Lease:
        return await self._leasing.lease(worker_name)

    def report(self, lease_id: str, outcome: Outcome) -> bool:
        return self._leasing.report(lease_id, outcome)

    # ================================================================ observers

    def reserved(self) -> tuple[int, int, int]:
        """Reserved millicpus, reserved memory bytes and running leases, now (cheap)."""
        leasing = self._leasing
        millicpus = sum(w.reserved.millicpus for w in leasing.workers())
        return millicpus, leasing.memory_reserved, leasing.running

    def statistics(self) -> SchedulerStatistics:
        """A frozen snapshot of queues, workers and counters."""
        operations = self._operations
        return collect_statistics(
            workers=self._leasing.workers(),
            queued_by_platform=self._queue.queued_by_platform(),
            queued_by_reservation=self._queue.queued_by_reservation(),
            queued_next=self._queue.next_queued(10),
            stage_counts=operations.stage_counts,
            completions=operations.completions,
            counters=operations.counters,
            operations=operations.all(),
            memory_reserved=self._leasing.memory_reserved,
            memory_budget=self._resources.memory_budget_bytes,
            builds=build_statistics(self._queue.shares),
        )

    # ================================================================ internals

    def _wake_workers(self) -> None:
        self._leasing.wake_all()

    async def _prepare(self, op: OperationState, route: Route | None) -> None:
        operations = self._operations
        try:
            if route is not None:
                await run_route(operations, op, route)
            if not op.done and await self._prepare_inner(op):
                operations.enqueue(op)
        except LreError as exc:
            unmatchable = isinstance(exc, FailedPrecondition) and not isinstance(exc, MissingBlobs)
            event = EventKind.UNMATCHABLE if unmatchable else None
            operations.complete(op, error=exc, event=event)
        except Exception:  # trio.Cancelled is a BaseException and passes through
            log.exception("preparing operation %s failed", op.name)
            operations.complete(
                op,
                error=Internal(
                    f"action {op.key.action_digest}: lre failed while checking it (see lre's log)"
                ),
            )

    async def _prepare_inner(self, op: OperationState) -> bool:
        """True when ``op`` is ready to queue; False when it ended (cache hit,
        or finished meanwhile). Raises the ``LreError`` to end it with."""
        operations = self._operations
        if not op.skip_cache_lookup and self._action_cache is not None:
            cached = await self._action_cache.get_result(op.key.action_digest)
            if op.done:
                return False
            if cached is not None:
                operations.counters["cache_hits"] += 1
                operations.complete(op, result=cached, cached=True)
                return False
        return await self._checker.check(op, self._leasing.worker_infos, operations.undedup)
