"""``WorkerLeasing``: the scheduler's workers, their leases and the outcomes.

It owns the registered workers, the leases they hold and what those reserve
(CPU, memory, running count). In-process workers reach it through the
``Scheduler``'s ``register_worker``, ``lease``, ``report``, ``heartbeat``,
``set_draining`` and ``unregister_worker``. A lease takes a queued operation
that fits the worker (``_queue``); its outcome ends the operation or requeues
it through ``Operations`` (retries, backpressure, memory ladder kills, sized
by ``_sizing``).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable

import trio

from lre.errors import NotFound, Unavailable
from lre.scheduler._events import (
    EventHook,
    backpressure_event,
    emit_event,
    escalation_event,
    gave_up_event,
    kill_event,
    memory_kill_text,
    oom_event,
)
from lre.scheduler._history import HistoryTap
from lre.scheduler._lease import Lease
from lre.scheduler._matching import matches_statically
from lre.scheduler._model import (
    Backpressure,
    Completed,
    InfrastructureFailure,
    MemoryExceeded,
    Outcome,
    Reservation,
    ResourcePolicy,
    Stage,
    WorkerInfo,
)
from lre.scheduler._operations import Operations
from lre.scheduler._protocols import ReservationAdvisor
from lre.scheduler._queue import RunQueue
from lre.scheduler._records import LeaseRecord, OperationState, WorkerState
from lre.scheduler._sizing import escalate, record_usage
from lre.scheduler._worker_health import WorkerHealth

# The scheduler's one logger: its warnings keep the name they always had.
log = logging.getLogger("lre.scheduler._scheduler")


class WorkerLeasing:
    """The workers and their leases (see the module docstring).

    ``workers_changed`` is called whenever a worker comes or goes; a lease
    ends its operation (or requeues it) after ``max_job_retries``
    infrastructure failures. ``advisor`` learns from every finished run;
    ``on_event`` and ``history`` are told of kills, failures and health.
    """

    def __init__(
        self,
        operations: Operations,
        queue: RunQueue,
        resources: ResourcePolicy,
        *,
        max_job_retries: int,
        workers_changed: Callable[[], None],
        advisor: ReservationAdvisor | None,
        on_event: EventHook | None,
        history: HistoryTap | None,
    ) -> None:
        self._operations = operations
        self._queue = queue
        self._resources = resources
        self._max_job_retries = max_job_retries
        self._workers_changed = workers_changed
        self._advisor = advisor
        self._on_event = on_event
        self._history = history
        self._worker_health = WorkerHealth()
        self._workers: dict[str, WorkerState] = {}
        self._leases: dict[str, LeaseRecord] = {}
        self._lease_ids = itertools.count(1)
        self.memory_reserved = 0
        self.running = 0

    def workers(self) -> Iterable[WorkerState]:
        return self._workers.values()

    def worker_infos(self) -> list[WorkerInfo]:
        return [w.info for w in self._workers.values()]

    def wake_all(self) -> None:
        """Every waiting ``lease`` call looks at the queue again."""
        for state in self._workers.values():
            state.wake_up()

    def register_worker(self, info: WorkerInfo) -> None:
        """Add a worker, or update the description of one already registered."""
        state = self._workers.get(info.name)
        if state is None:
            self._workers[info.name] = WorkerState(info)
        else:
            state.info = info
        self._queue.forget_worker(info.name)
        self._workers_changed()
        self._capacity_changed()
        self.wake_all()

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
        self._workers_changed()
        self._capacity_changed()
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
            taken = self._queue.take(state, self.memory_reserved, self.running)
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
          ``max_steps`` kills (or a final one) the operation ends with the
          outcome's result when it has one, else RESOURCE_EXHAUSTED.

        Returns False (and does nothing) for a lease that is no longer held,
        e.g. already reported or taken back when the worker unregistered.
        After a cancellation the outcome is ignored apart from releasing.
        """
        return self._finish_lease(lease_id, outcome)

    # ================================================================ internals

    def _capacity_changed(self) -> None:
        """Tell the fair shares what the workers offer now (memory: at most the budget)."""
        millicpus = sum(w.info.capacity.millicpus for w in self._workers.values())
        memory = sum(w.info.capacity.memory_bytes for w in self._workers.values())
        budget = self._resources.memory_budget_bytes
        if budget is not None:
            memory = min(memory, budget)
        self._queue.shares.set_capacity(millicpus, memory)

    def _worker(self, name: str) -> WorkerState:
        state = self._workers.get(name)
        if state is None:
            raise NotFound(f"worker {name!r} is not registered")
        return state

    def _start(
        self, state: WorkerState, op: OperationState, reservation: Reservation, exclusive: bool
    ) -> Lease:
        info = state.info
        op.attempt += 1
        lease = op.lease_for(
            f"{info.name}/{next(self._lease_ids)}",
            info,
            reservation,
            exclusive,
            max_kills=self._resources.max_steps,
        )
        record = LeaseRecord(lease, op, state)
        state.leases[lease.lease_id] = record
        self._leases[lease.lease_id] = record
        state.reserved = state.reserved + reservation
        self.memory_reserved += reservation.memory_bytes
        self.running += 1
        if op.build is not None:
            self._queue.shares.started(op.build, reservation)
        op.lease = record
        self._operations.set_stage(op, Stage.EXECUTING)
        op.notify()
        return lease

    def _finish_lease(self, lease_id: str, outcome: Outcome) -> bool:
        record = self._leases.pop(lease_id, None)
        if record is None:
            return False
        lease, op, state = record.lease, record.op, record.worker
        state.leases.pop(lease_id, None)
        state.reserved = state.reserved - lease.reservation
        self.memory_reserved -= lease.reservation.memory_bytes
        self.running -= 1
        if op.build is not None:
            self._queue.shares.finished(op.build, lease.reservation)
        if op.lease is record:
            op.lease = None
        if self._history is not None:
            self._history.lease_ended(op, lease, outcome)
        self.wake_all()
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
            self._operations.complete(
                op,
                result=outcome.result,
                error=outcome.error,
                message=outcome.message,
                worker=worker,
                peak_rss_bytes=outcome.usage.peak_rss_bytes if outcome.usage else None,
            )
        elif isinstance(outcome, InfrastructureFailure):
            op.retries += 1
            if op.retries > self._max_job_retries:
                self._operations.complete(
                    op,
                    error=outcome.error,
                    message=(
                        f"gave up after {op.attempt} attempt(s); "
                        f"last error: {outcome.error.message}"
                    ),
                    worker=worker,
                )
            else:
                self._operations.counters["retries"] += 1
                self._operations.enqueue(op)
        elif isinstance(outcome, Backpressure):
            self._operations.counters["backpressure"] += 1
            emit_event(self._on_event, backpressure_event(op, lease, outcome))
            op.attempt -= 1
            self._operations.enqueue(op)
        elif isinstance(outcome, MemoryExceeded):
            self._operations.counters["ladder_kills"] += 1
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
            if error is not None and outcome.result is not None:
                # The kill would only repeat: the killed run's result (exit
                # 137, lre's explanation on its stderr) ends the operation as
                # the action's own failure, which no client retries.
                emit_event(self._on_event, gave_up_event(op, lease, outcome))
                self._operations.complete(
                    op,
                    result=outcome.result,
                    message=(
                        f"not run again after {op.kills} kill(s); lre's explanation "
                        "ends the action's stderr"
                    ),
                    worker=worker,
                    peak_rss_bytes=outcome.peak_rss_bytes,
                    gave_up=True,
                )
            elif error is not None:
                self._operations.complete(
                    op, error=error, worker=worker, peak_rss_bytes=outcome.peak_rss_bytes
                )
            else:
                self._operations.counters["ladder_requeues"] += 1
                emit_event(self._on_event, escalation_event(op, lease, outcome))
                self._operations.enqueue(op)
        return True
