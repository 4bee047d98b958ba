"""A unit of work handed to a worker, and how the worker learns it was cancelled."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import trio

from lre.proto import re_pb2
from lre.scheduler._model import ActionKey, RequestInfo, Reservation


class CancelSignal:
    """Set once when the scheduler cancels a lease (client gone, CancelOperation,
    worker unregistered, shutdown). Callbacks run synchronously in the Trio
    thread; one registered after cancellation runs at once. The Trio event
    behind ``wait`` is made only when someone waits (thousands of leases may
    be held at once)."""

    __slots__ = ("_callbacks", "_event", "_set", "reason")

    def __init__(self) -> None:
        self._event: trio.Event | None = None
        self._callbacks: list[Callable[[], object]] | None = None
        self._set = False
        self.reason = ""

    @property
    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if self._set:
            await trio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = trio.Event()
        await self._event.wait()

    def add_callback(self, callback: Callable[[], object]) -> None:
        if self._set:
            callback()
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    def set(self, reason: str) -> None:
        if self._set:
            return
        self._set = True
        self.reason = reason
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks or [], None
        for callback in callbacks:
            callback()


@dataclass(frozen=True, slots=True, eq=False)
class Lease:
    """Everything a worker needs to run one attempt of one action.

    The worker must call ``Scheduler.report(lease_id, outcome)`` exactly once,
    also after cancellation (the reservation is released only then). To stop
    the action when the scheduler cancels it, tie a cancel scope to the lease:
    ``lease.on_cancel(scope.cancel)``.

    - ``platform``: the action's properties after ``property_modifier``
      (Action.platform, falling back to Command.platform).
    - ``reservation``: what is held on the worker while it runs; the worker
      kills the action when its RSS passes ``reservation.memory_bytes`` x its
      kill factor and reports ``MemoryExceeded``. ``exclusive`` means the
      action reserved the whole worker (past the top of the memory ladder).
    - ``attempt``: 1 for the first run; only infrastructure retries increase
      it (backpressure and ladder requeues keep it).
    - ``ladder_step``: 0 = the initial reservation, n = ladder[n-1], and
      len(ladder)+1 = the whole worker.
    - ``timeout_s``: the Action's timeout, or the worker's default.
    - ``queued_at``: wall-clock time (``time.time()``) the operation was queued.
    - ``kind_key``: what identifies this kind of action for learned reservations.
    - ``memory_kills``: how often lre killed earlier runs of this operation
      for memory; ``last_chance``: a memory kill of this run ends the
      operation (it is the last one ``max_steps`` allows), so the worker
      answers it with a result the client does not retry, as for a kill
      over the hard ceiling.
    """

    lease_id: str
    operation_name: str
    worker_name: str
    action_key: ActionKey
    action: re_pb2.Action
    command: re_pb2.Command
    platform: Mapping[str, str]
    reservation: Reservation
    exclusive: bool
    attempt: int
    ladder_step: int
    timeout_s: float
    queued_at: float
    request_info: RequestInfo
    kind_key: str
    do_not_cache: bool
    skip_cache_lookup: bool
    inline_stdout: bool = False
    inline_stderr: bool = False
    inline_output_files: tuple[str, ...] = ()
    memory_kills: int = 0
    last_chance: bool = False
    cancel_signal: CancelSignal = field(default_factory=CancelSignal)

    @property
    def cancelled(self) -> bool:
        return self.cancel_signal.is_set

    def on_cancel(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` when the lease is cancelled (at once if it already is)."""
        self.cancel_signal.add_callback(callback)

    async def wait_cancelled(self) -> None:
        await self.cancel_signal.wait()
