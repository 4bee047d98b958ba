"""``Operations``: the scheduler's one operation registry and their lifecycle.

It owns every operation record (by name), the dedup index, the retention of
finished operations, the stage counts, completions and counters, and moves
an operation through its stages: queueing and requeueing, completion (with
its event and history record), cancellation and the expiry of finished
operations. Watches (``_watch``) tell it when a watcher leaves, and routes
(``_routing``) act on it; the leasing of queued operations to workers is
``WorkerLeasing``'s (``_worker_leasing``).
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from collections.abc import Callable

import trio

from lre.errors import Cancelled, DeadlineExceeded, LreError, NotFound
from lre.proto import re_pb2
from lre.scheduler._events import EventHook, emit_event, exit_event, failure_event
from lre.scheduler._history import HistoryTap
from lre.scheduler._model import ActionKey, RequestInfo, Stage
from lre.scheduler._names import new_operation_name, parse_operation_name
from lre.scheduler._queue import RunQueue
from lre.scheduler._records import OperationState
from lre.scheduler._statistics import completion_kind
from lre.scheduler._watch import detach_watcher
from lre.snapshot import EventKind


class Operations:
    """The registry and lifecycle (see the module docstring).

    - ``queue``: where queued operations wait (shared with the leasing).
    - ``wake_workers``: called whenever an operation is queued.
    - ``retain_s``: how long a finished operation stays findable.
    - ``detach_grace_s``: how long an unfinished operation nobody watches is
      kept before it is cancelled.
    - ``on_event`` / ``history``: told of failures and of every operation that
      ends (exceptions they raise are logged and ignored).

    ``nursery`` is the scheduler's while it runs (None otherwise): delayed
    cancellations of unwatched operations run in it.
    """

    def __init__(
        self,
        queue: RunQueue,
        *,
        wake_workers: Callable[[], None],
        retain_s: float,
        detach_grace_s: float,
        on_event: EventHook | None,
        history: HistoryTap | None,
    ) -> None:
        self._queue = queue
        self._wake_workers = wake_workers
        self._retain_s = retain_s
        self._detach_grace_s = detach_grace_s
        self._on_event = on_event
        self._history = history
        self._ops: dict[str, OperationState] = {}
        self._dedup: dict[ActionKey, OperationState] = {}
        self._retained: deque[tuple[float, OperationState]] = deque()
        self._seq = itertools.count()
        self.nursery: trio.Nursery | None = None
        self.stage_counts: Counter[Stage] = Counter()
        self.completions: Counter[str] = Counter()
        self.counters: Counter[str] = Counter()

    # ================================================================ the registry

    def add(
        self, request: re_pb2.ExecuteRequest, key: ActionKey, request_info: RequestInfo
    ) -> tuple[OperationState, bool]:
        """A new operation at CACHE_CHECK and True, or the unfinished one with
        the same ``key`` it joins (unless the request skips the cache) and False."""
        self.counters["submitted"] += 1
        if not request.skip_cache_lookup:
            existing = self._dedup.get(key)
            if existing is not None and not existing.done:
                self.counters["dedup_hits"] += 1
                return existing, False
        op = OperationState(
            new_operation_name(request.instance_name), key, next(self._seq), request, request_info
        )
        self._ops[op.name] = op
        self.stage_counts[Stage.CACHE_CHECK] += 1
        if not request.skip_cache_lookup:
            self._dedup[key] = op
            op.dedup = True
        return op, True

    def find(self, name: str) -> OperationState:
        """The operation ``name``. ``NotFound`` when it never existed, was
        deleted or finished longer ago than the retention."""
        op = self._ops.get(name)
        if op is None:
            parse_operation_name(name)  # NotFound for names lre never makes
            raise NotFound(
                f"operation {name!r}: not found (unknown, deleted, or finished more than "
                f"{self._retain_s:g} s ago)"
            )
        return op

    def forget(self, name: str) -> None:
        """Drop operation ``name`` (it keeps running); ``NotFound`` like ``find``."""
        del self._ops[self.find(name).name]

    def all(self) -> list[OperationState]:
        """Every known operation (live and retained), in no set order."""
        return list(self._ops.values())

    def undedup(self, op: OperationState) -> None:
        """Identical actions submitted from now on do not join ``op``."""
        if op.dedup:
            op.dedup = False
            if self._dedup.get(op.key) is op:
                del self._dedup[op.key]

    # ================================================================ watches

    def detach(self, op: OperationState) -> None:
        """A watcher of ``op`` left (``OperationWatch``); the last one leaving
        an unfinished ``op`` cancels it after the grace period."""
        detach_watcher(
            op,
            self._detach_grace_s,
            self.nursery,
            lambda: self.cancel(op, "no client is watching it any more"),
        )

    # ================================================================ stages

    def set_stage(self, op: OperationState, stage: Stage) -> None:
        op.cached_snapshot = None
        if op.away:  # not in the local counts
            op.stage = stage
            return
        self.stage_counts[op.stage] -= 1
        op.stage = stage
        if stage is not Stage.COMPLETED:
            self.stage_counts[stage] += 1

    def take_away(self, op: OperationState, message: str) -> None:
        """``op`` runs elsewhere from now on (out of the local counts and dedup)."""
        self.stage_counts[op.stage] -= 1
        op.away = True
        op.message = message
        self.undedup(op)  # identical actions submitted later run on their own

    def bring_back(self, op: OperationState) -> None:
        """``op`` runs here after all, from CACHE_CHECK."""
        op.away = False
        op.message = ""
        op.stage = Stage.CACHE_CHECK
        self.stage_counts[Stage.CACHE_CHECK] += 1

    def enqueue(self, op: OperationState) -> None:
        """Queue ``op`` (stage QUEUED) and wake the workers."""
        self.set_stage(op, Stage.QUEUED)
        self._queue.push(op)
        op.notify()
        self._wake_workers()

    def cancel(self, op: OperationState, reason: str) -> None:
        """End ``op`` with CANCELLED; its lease, if any, is told to stop."""
        if op.done:
            return
        if op.lease is not None:
            op.lease.lease.cancel_signal.set(reason)
            self.counters["lease_cancellations"] += 1
        self.complete(op, error=Cancelled(f"operation {op.name}: {reason}"))

    def cancel_all(self, reason: str) -> None:
        for op in list(self._ops.values()):
            self.cancel(op, reason)

    def complete(
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
        """End ``op`` (nothing if it ended already). An error other than a
        cancellation is also an event: ``event`` when given, else TIMEOUT for
        ``DeadlineExceeded``, else FAILURE (not for an operation routed away:
        see ``_routing``); so is a command that exited non-zero (FAILURE
        naming the exit code). ``gave_up``: lre's memory control killed it for
        the last time (its ``result`` is the killed run's; not retried)."""
        if op.done:
            return
        if op.route_scope is not None:
            op.route_scope.cancel()
        self._queue.remove(op)
        self.set_stage(op, Stage.COMPLETED)
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
        self.undedup(op)
        self._retained.append((trio.current_time() + self._retain_s, op))
        if op.away:
            op.notify()
            return
        kind = completion_kind(result=result, cached=cached, error=error)
        self.completions[kind] += 1
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

    # ================================================================ time

    def tick(self) -> None:
        """Wake every watcher of an unfinished operation (progress update;
        nothing changed, so the cached snapshots stay)."""
        for op in self._ops.values():
            if not op.done:
                op.wake()

    def sweep(self) -> None:
        """Forget the finished operations whose retention ran out."""
        now = trio.current_time()
        retained = self._retained
        while retained and retained[0][0] <= now:
            _, op = retained.popleft()
            if self._ops.get(op.name) is op:
                del self._ops[op.name]
