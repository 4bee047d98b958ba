"""Carrying out the memory policy: freezing, thawing and killing actions.

``MemoryControl`` runs after every sampler pass (``ProcessTreeSampler.on_pass``):
it gives the ``MemoryGovernor`` the running actions' memory (RSS plus
their private tmpfs, ``ActionUsage.memory_bytes``) and the host's reading
(``PressureMonitor``) and does what it decides:

- freeze: where lre owns a cgroup freezer (``CgroupFreezer``, v1 here, as
  root), the action's processes are moved into a frozen cgroup of its own;
  otherwise SIGSTOP goes to the action's process group and to every process
  the sampler counted for it (its session, group or PID namespace). Either
  way a fresh pass then looks for members that appeared meanwhile, until the
  list is stable (at most ``FREEZE_ROUNDS`` times). A process that leaves
  both session and group under the portable containment is not reached (as
  for sampling). If the cgroup cannot be made or frozen, SIGSTOP is used.
- thaw: ``THAWED`` for the cgroup, else SIGCONT to the same processes (the
  group and the last pass's members).
- kill: through ``kill`` (the runner's ``memory_kill``), which ends the run
  as ``MemoryExceeded`` (requeued one ladder step up unless ``final``); a
  frozen action is then thawed, since a task frozen by a cgroup acts on no
  signal, not even SIGKILL, until thawed (a SIGSTOPped one dies anyway).
- ending a frozen run (cancellation, shutdown): ``end_frozen`` kills and
  thaws it at once, so the run ends without waiting for the kill grace (a
  stopped process acts on no SIGTERM).

Each freeze and each decided thaw is also told to ``on_event`` (when set) as
a ``MemoryAction`` naming the action, its RSS and reservation and why, so the
app can show it (the TUI's events pane, ``/api/v1/stats``); kills reach the
app through the scheduler (``MemoryExceeded``). An exception the hook raises
is logged and ignored: the policy goes on.

While memory is short or an action is frozen, the sampler runs at the fast
interval. A PSI stall event (``PsiTrigger``, ``lre/worker/_psi_trigger.py``,
calling ``pressure_event``) makes the sampler pass at once and keeps it at the
fast interval for ``PRESSURE_EVENT_FAST_S`` after the event. Frozen time is
kept per action (``frozen_seconds``), so the worker can leave it out of the
action's timeout and its learned wall time.

Failures of a signal (the process already gone) are ignored: the action is
ending anyway. Counters: ``statistics()``.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from lre.snapshot import MemoryControlRow
from lre.worker.containment import Containment
from lre.worker.memory._freezer import CgroupFreezer
from lre.worker.memory._governor import (
    GovernedAction,
    MemoryDecision,
    MemoryGovernor,
    MemoryReading,
)
from lre.worker.memory._pressure import PressureMonitor
from lre.worker.memory._psi_trigger import PsiTrigger
from lre.worker.usage import ProcessTreeSampler

__all__ = ["MemoryAction", "MemoryControl"]

log = logging.getLogger(__name__)

#: Passes made while freezing one action to catch children forked meanwhile.
FREEZE_ROUNDS = 4

#: Seconds the sampler stays at the fast interval after a PSI stall event
#: (the unprivileged trigger's window: another event may follow within it).
PRESSURE_EVENT_FAST_S = 2.0

#: ``kill(action_id, reason, final)``
Killer = Callable[[str, str, bool], object]


@dataclass(frozen=True, slots=True)
class MemoryAction:
    """One freeze or thaw of an action (``action_id``: the lease id). ``rss_bytes``
    is the action's memory at the last pass (RSS plus private tmpfs),
    ``reserved_bytes`` its reservation;
    ``reason`` says why (for a freeze: why memory is short; for a thaw: what
    made room); ``frozen_seconds`` is how long a thawed action was frozen;
    ``method`` is how it was (or had been) frozen: ``SIGSTOP`` or
    ``cgroup freezer``."""

    kind: Literal["freeze", "thaw"]
    action_id: str
    rss_bytes: int
    reserved_bytes: int
    reason: str
    method: str
    frozen_seconds: float = 0.0


#: Told of every ``MemoryAction`` (on the Trio thread, from the sampler's pass).
MemoryActionHook = Callable[[MemoryAction], object]


class _Governed:
    __slots__ = (
        "by_cgroup",
        "frozen_seconds",
        "frozen_since",
        "group",
        "killed",
        "order",
        "reserved",
    )

    def __init__(self, group: int, order: int, reserved: int) -> None:
        self.group = group
        self.order = order
        self.reserved = reserved
        self.frozen_since: float | None = None
        self.frozen_seconds = 0.0
        self.killed = False
        #: frozen through the cgroup freezer (else by SIGSTOP)
        self.by_cgroup = False


@dataclass(frozen=True, slots=True)
class ControlPace:
    """The sampler's interval (seconds) while memory is plenty (``normal``)
    and while it is short or an action frozen (``pressure``); ``clock`` is
    monotonic seconds (tests pass their own)."""

    normal: float
    pressure: float
    clock: Callable[[], float] = time.monotonic


class MemoryControl:
    """See the module docstring. ``freezer``: the cgroup freezer to use where
    it is available (None or unavailable: SIGSTOP)."""

    def __init__(
        self,
        governor: MemoryGovernor,
        monitor: PressureMonitor,
        sampler: ProcessTreeSampler,
        containment: Containment,
        *,
        kill: Killer,
        pace: ControlPace,
        freezer: CgroupFreezer | None = None,
        worker: str = "",
    ) -> None:
        #: The worker's name, as its ``MemoryControlRow`` shows it.
        self.worker = worker
        #: Told of each freeze and thaw (see the module docstring; None: nobody).
        self.on_event: MemoryActionHook | None = None
        self.freezer = freezer if freezer is not None and freezer.available else None
        self.governor = governor
        self.monitor = monitor
        self.sampler = sampler
        self.containment = containment
        self._kill = kill
        self._normal_interval = pace.normal
        self._pressure_interval = pace.pressure
        self._clock = pace.clock
        self._actions: dict[str, _Governed] = {}
        self._order = itertools.count()
        self._busy = False
        self._frozen = self._thawed = self._killed = 0
        self._last_decision = MemoryDecision(False)
        #: The PSI trigger that calls ``pressure_event`` (set by the worker;
        #: None: the timer alone), shown in ``statistics().sampling``.
        self.trigger: PsiTrigger | None = None
        self._pressure_events = 0
        self._fast_until = -1e18

    # ------------------------------------------------------------------ registration

    def started(self, action_id: str, group: int, reserved_bytes: int) -> None:
        """Govern the action whose process group is ``group`` (call after spawn)."""
        self._actions[action_id] = _Governed(group, next(self._order), reserved_bytes)

    def ended(self, action_id: str) -> float:
        """Stop governing the action; returns the seconds it spent frozen."""
        governed = self._actions.pop(action_id, None)
        if governed is None:
            return 0.0
        if governed.frozen_since is not None:
            governed.frozen_seconds += self._clock() - governed.frozen_since
        if self.freezer is not None:
            self.freezer.release(action_id)
        self._publish()
        return governed.frozen_seconds

    def end_frozen(self, action_id: str) -> bool:
        """The run is being ended by lre (cancelled, timed out, shut down):
        when the action is frozen, SIGKILL its processes and thaw it, so it
        dies now rather than after the kill grace (a frozen process acts on no
        SIGTERM; one frozen by a cgroup not even on SIGKILL until thawed).
        Returns whether it was frozen."""
        governed = self._actions.get(action_id)
        if governed is None or governed.frozen_since is None:
            return False
        governed.killed = True
        self._signal(governed, self._members(action_id), signal.SIGKILL)
        self._thaw(action_id, self._clock(), count=False)
        self._publish()
        return True

    def frozen_seconds(self, action_id: str) -> float:
        """Seconds the action has been frozen so far (also while frozen now)."""
        governed = self._actions.get(action_id)
        if governed is None:
            return 0.0
        ongoing = 0.0 if governed.frozen_since is None else self._clock() - governed.frozen_since
        return governed.frozen_seconds + ongoing

    def is_frozen(self, action_id: str) -> bool:
        governed = self._actions.get(action_id)
        return governed is not None and governed.frozen_since is not None

    # ------------------------------------------------------------------ the pass hook

    def after_pass(self) -> MemoryDecision:
        """Decide and act once (the sampler's ``on_pass``)."""
        if self._busy:  # a pass made while freezing
            return self._last_decision
        self._busy = True
        try:
            return self._step()
        finally:
            self._busy = False

    def _step(self) -> MemoryDecision:
        now = self._clock()
        actions = []
        for action_id, governed in self._actions.items():
            if governed.killed:
                continue
            usage = self.sampler.snapshot(action_id)
            actions.append(
                GovernedAction(
                    action_id,
                    governed.order,
                    usage.memory_bytes if usage is not None else 0,
                    governed.reserved,
                    governed.frozen_since,
                )
            )
        reading = self.monitor.read()
        settling = any(g.killed for g in self._actions.values())
        decision = self.governor.decide(actions, reading, now, settling=settling)
        self._last_decision = decision
        for action_id, reason, final in decision.kill:
            self._killed += 1
            # still known (``frozen_seconds``) until the run ends (``ended``),
            # but no longer governed: ``_step`` skips it from now on
            victim = self._actions.get(action_id)
            if victim is not None:
                victim.killed = True
            log.warning("memory control: killing %s: %s", action_id, reason)
            self._kill(action_id, reason, final)
            if victim is not None and victim.frozen_since is not None:
                # SIGKILL is pending: it dies as it wakes
                self._thaw(action_id, now, count=False)
        for action_id in decision.freeze:
            self._freeze(action_id, decision.reason, now)
        for action_id in decision.thaw:
            self._thaw(action_id, now, reason=self._thaw_reason(action_id, reading))
        self._publish()
        return decision

    def _thaw_reason(self, action_id: str, reading: MemoryReading) -> str:
        """Why the governor thawed ``action_id``: it is the oldest action (which
        always runs), else memory freed up."""
        governed = self._actions.get(action_id)
        live = [g.order for g in self._actions.values() if not g.killed]
        if governed is not None and live and governed.order == min(live):
            return "the oldest running action always runs"
        return f"memory freed: host MemAvailable {reading.available_bytes >> 20} MiB"

    def _tell(
        self, kind: Literal["freeze", "thaw"], action_id: str, reason: str, method: str
    ) -> None:
        """Give ``on_event`` one ``MemoryAction`` (errors logged, not raised)."""
        if self.on_event is None:
            return
        governed = self._actions.get(action_id)
        usage = self.sampler.snapshot(action_id)
        event = MemoryAction(
            kind,
            action_id,
            usage.memory_bytes if usage is not None else 0,
            governed.reserved if governed is not None else 0,
            reason,
            method,
            governed.frozen_seconds if governed is not None and kind == "thaw" else 0.0,
        )
        try:
            self.on_event(event)
        except Exception:
            log.exception("memory control: event hook failed for %s of %s", kind, action_id)

    def pressure_event(self) -> None:
        """The kernel reported a memory stall (PSI trigger; Trio thread):
        sample now and at the fast interval for ``PRESSURE_EVENT_FAST_S``."""
        self._pressure_events += 1
        self._fast_until = self._clock() + PRESSURE_EVENT_FAST_S
        self.sampler.interval = self._pressure_interval
        self.sampler.wake()

    def _publish(self) -> None:
        frozen = sum(1 for g in self._actions.values() if g.frozen_since is not None)
        short = self._last_decision.reason
        self.monitor.set_state(short, frozen)
        fast = bool(short) or frozen > 0 or self._clock() < self._fast_until
        self.sampler.interval = self._pressure_interval if fast else self._normal_interval

    # ------------------------------------------------------------------ signals

    def _signal(self, governed: _Governed, pids: tuple[int, ...], sig: int) -> None:
        try:
            self.containment.signal_action(governed.group, sig)
        except OSError:
            pass
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    def _members(self, action_id: str) -> tuple[int, ...]:
        members = set(self.sampler.members(action_id))
        if self.freezer is not None:
            members.update(self.freezer.members(action_id))
        return tuple(sorted(members))

    def _freeze(self, action_id: str, reason: str, now: float) -> None:
        governed = self._actions.get(action_id)
        if governed is None or governed.frozen_since is not None:
            return
        stopped: set[int] = set()
        by_cgroup = self.freezer is not None
        for _ in range(FREEZE_ROUNDS):
            pids = tuple(p for p in self.sampler.members(action_id) if p not in stopped)
            if stopped and not pids:
                break
            if by_cgroup:
                assert self.freezer is not None
                try:
                    self.freezer.freeze(action_id, pids)
                except OSError as error:
                    log.warning(
                        "memory control: cannot freeze %s by cgroup (%s); SIGSTOP instead",
                        action_id,
                        error,
                    )
                    by_cgroup = False
                    self.freezer.thaw(action_id)
                    pids = (*stopped, *pids)
            if not by_cgroup:
                self._signal(governed, pids, signal.SIGSTOP)
            stopped.update(pids)
            self.sampler.sample_once()  # new members forked before the stop
        governed.frozen_since = now
        governed.by_cgroup = by_cgroup
        self._frozen += 1
        method = _method(by_cgroup)
        log.warning(
            "memory control: froze %s (%d process(es), %s): %s",
            action_id,
            len(stopped),
            method,
            reason,
        )
        self._tell("freeze", action_id, reason, method)

    def _thaw(self, action_id: str, now: float, *, count: bool = True, reason: str = "") -> None:
        """Thaw (``count``: as a decision, counted in ``thawed`` and told to
        ``on_event`` with ``reason``; else to let a killed action die)."""
        governed = self._actions.get(action_id)
        if governed is None or governed.frozen_since is None:
            return
        method = _method(governed.by_cgroup)
        if governed.by_cgroup and self.freezer is not None:
            self.freezer.thaw(action_id)
        else:
            self._signal(governed, self.sampler.members(action_id), signal.SIGCONT)
        governed.frozen_seconds += now - governed.frozen_since
        governed.frozen_since = None
        governed.by_cgroup = False
        if count:
            self._thawed += 1
            log.info("memory control: thawed %s: %s", action_id, reason)
            self._tell("thaw", action_id, reason, method)

    def thaw_all(self) -> None:
        """Wake every frozen action (shutdown: a stopped process ignores SIGTERM)."""
        now = self._clock()
        for action_id in list(self._actions):
            self._thaw(action_id, now, reason="the worker is stopping")
        self._publish()

    def statistics(self) -> MemoryControlRow:
        """Counters since start and the state now, as the snapshot shows them."""
        reading = self.monitor.last_reading
        frozen_ids = tuple(a for a, g in self._actions.items() if g.frozen_since is not None)
        return MemoryControlRow(
            worker=self.worker,
            frozen_now=len(frozen_ids),
            frozen=self._frozen,
            thawed=self._thawed,
            killed=self._killed,
            short_reason=self._last_decision.reason,
            available_bytes=reading.available_bytes,
            pressure_full_avg10=reading.pressure_full_avg10,
            frozen_leases=frozen_ids,
            sampling=self.trigger.mode if self.trigger is not None else "timer: no psi trigger",
            pressure_events=self._pressure_events,
        )


def _method(by_cgroup: bool) -> str:
    return "cgroup freezer" if by_cgroup else "SIGSTOP"
