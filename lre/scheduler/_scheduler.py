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

This module holds the client and observer roles. The one operation
registry and lifecycle (stages, dedup, cancellation, retention) and the
constructor are ``OperationLifecycle``'s (``_lifecycle``); the worker role and
the outcome of leases (retries, ladder kills) ``WorkerLeasing``'s
(``_worker_leasing``). The queue and leasing are in ``_queue``, the checks
before queueing in ``_preparation``, reservation sizing in ``_sizing``,
watchers in ``_watch``; a wrapping scheduler that runs some operations
elsewhere routes them through ``_routing`` (they stay in this registry).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from lre.digest import Digest, resolve_digest_function
from lre.errors import FailedPrecondition, Internal, LreError, MissingBlobs, NotFound, Unavailable
from lre.proto import re_pb2
from lre.scheduler._model import ActionKey, OperationSnapshot, RequestInfo, Stage
from lre.scheduler._names import new_operation_name, parse_operation_name
from lre.scheduler._records import OperationState
from lre.scheduler._routing import Route, run_route
from lre.scheduler._statistics import SchedulerStatistics, build_statistics, collect_statistics
from lre.scheduler._watch import OperationWatch, attach_watcher, detach_watcher
from lre.scheduler._worker_leasing import WorkerLeasing
from lre.snapshot import EventKind

log = logging.getLogger(__name__)


class Scheduler(WorkerLeasing):
    """See the module docstring; the constructor's parameters are listed on
    ``OperationLifecycle``."""

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
            builds=build_statistics(self._queue.shares),
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
