"""The memory policy: when memory is short, which action to freeze, thaw or kill.

Pure (no I/O, no clock of its own): ``MemoryGovernor.decide`` takes the running
actions' sampled RSS and a ``MemoryReading`` of the host, and returns a
``MemoryDecision``; ``lre.worker._memory_control`` carries it out. Tests feed it
readings directly.

Memory is *short* when any of:

- the host's MemAvailable is below ``headroom_bytes`` (whoever uses the memory:
  lre's actions, the user's browser, another build);
- the running actions' summed RSS, plus its growth since the last call (one
  more interval of it), passes ``budget_bytes x budget_share``;
- PSI's ``full avg10`` of ``/proc/pressure/memory`` reaches
  ``pressure_threshold`` (where the kernel has PSI; 0 = not looked at).

An action exceeding its reservation is not, by itself, a reason to act; only
``ceiling_bytes`` (the top ladder step) is a hard limit at all times.

Under shortage, one step per call:

1. an action whose RSS passes ``ceiling_bytes`` is killed (``final``: no retry);
2. MemAvailable below ``floor_bytes``: the newest frozen action is killed (and
   requeued one ladder step up by the scheduler); with nothing frozen, the
   newest running one other than the oldest; the oldest only when it runs alone;
   no second one until the first has ended (its memory is freed then);
3. an action frozen longer than ``max_frozen_s`` is killed (requeued);
4. while the unfrozen actions' RSS still grows, every one of them that grew
   since the last call (or is seen for the first time) is frozen at once,
   furthest over its reservation first, then the newest; never the oldest
   running action, so the build always moves. Freezing one per call let the
   others grow on for a sampling interval each (ten actions at 200 MB/s went
   300 MiB past a 2 GiB budget); if the sum grew but no single one did, the
   one furthest over is frozen;
5. memory no longer short, what is available above the headroom covers the
   rest of the oldest frozen action's reservation (at least 64 MiB), and
   ``thaw_interval_s`` passed since the last thaw: that one is thawed (one at
   a time).

The oldest action is never left frozen: if it is frozen (older ones ended), it
is thawed at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "GovernedAction",
    "GovernorLimits",
    "MemoryDecision",
    "MemoryGovernor",
    "MemoryReading",
]

#: Growth of the unfrozen actions' summed RSS between two calls that counts as
#: "still growing" (smaller changes are page-accounting noise).
GROWTH_BYTES = 1 << 20
#: Least memory above the headroom for a thaw.
THAW_ROOM_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class MemoryReading:
    """The host's state: MemAvailable, and PSI's ``full avg10`` (None without PSI)."""

    available_bytes: int
    pressure_full_avg10: float | None = None


@dataclass(frozen=True, slots=True)
class GovernedAction:
    """One running action as the governor sees it. ``order`` increases with
    the start (smaller = older); ``frozen_since`` is None while it runs.
    ``rss_bytes`` is the action's memory figure: its processes' RSS plus the
    space used in its private tmpfs (``ActionUsage.memory_bytes``)."""

    action_id: str
    order: int
    rss_bytes: int
    reserved_bytes: int
    frozen_since: float | None = None

    @property
    def over_bytes(self) -> int:
        return self.rss_bytes - self.reserved_bytes


@dataclass(frozen=True, slots=True)
class GovernorLimits:
    """Thresholds (see the module docstring); bytes, seconds, percent."""

    headroom_bytes: int
    floor_bytes: int
    ceiling_bytes: int = 0
    budget_bytes: int = 0
    budget_share: float = 0.9
    pressure_threshold: float = 10.0
    max_frozen_s: float = 120.0
    thaw_interval_s: float = 1.0


@dataclass(frozen=True, slots=True)
class MemoryDecision:
    """What to do now. ``kill`` holds ``(action_id, reason, final)``; a final
    kill must not be retried (the hard ceiling)."""

    short: bool
    reason: str = ""
    freeze: tuple[str, ...] = ()
    thaw: tuple[str, ...] = ()
    kill: tuple[tuple[str, str, bool], ...] = field(default=())


class MemoryGovernor:
    """Keeps the little state the policy needs between calls (last growth
    reading, last thaw). Not thread-safe; one per worker."""

    def __init__(self, limits: GovernorLimits) -> None:
        if limits.floor_bytes > limits.headroom_bytes:
            raise ValueError(
                f"memory floor {limits.floor_bytes} is above the headroom {limits.headroom_bytes}"
            )
        self.limits = limits
        self._last_running_rss: int | None = None
        self._last_rss: dict[str, int] = {}
        self._last_total: int | None = None
        self._last_thaw = -1e18

    def shortage(self, actions: Sequence[GovernedAction], reading: MemoryReading) -> str:
        """Why memory is short now ("" when it is not)."""
        limits = self.limits
        if reading.available_bytes < limits.headroom_bytes:
            return (
                f"host MemAvailable {reading.available_bytes >> 20} MiB is under the "
                f"headroom of {limits.headroom_bytes >> 20} MiB"
            )
        total = sum(a.rss_bytes for a in actions)
        # One more interval at the last interval's growth: the budget is
        # passed before the next reading could show it otherwise.
        growth = max(0, total - self._last_total) if self._last_total is not None else 0
        if limits.budget_bytes and total + growth > limits.budget_bytes * limits.budget_share:
            return (
                f"running actions use {total >> 20} MiB of the "
                f"{limits.budget_bytes >> 20} MiB budget (growing {growth >> 20} MiB per pass)"
            )
        pressure = reading.pressure_full_avg10
        threshold = limits.pressure_threshold
        if threshold > 0 and pressure is not None and pressure >= threshold:
            return f"memory pressure (PSI full avg10) {pressure:g}%"
        return ""

    def decide(
        self,
        actions: Sequence[GovernedAction],
        reading: MemoryReading,
        now: float,
        *,
        settling: bool = False,
    ) -> MemoryDecision:
        """One step of the policy (see the module docstring). ``settling``: an
        action killed earlier has not ended yet (its memory is not free yet),
        so the floor kills no other one meanwhile."""
        limits = self.limits
        reason = self.shortage(actions, reading)
        short = bool(reason)
        by_age = sorted(actions, key=lambda a: a.order)
        running = [a for a in by_age if a.frozen_since is None]
        frozen = [a for a in by_age if a.frozen_since is not None]
        running_rss = sum(a.rss_bytes for a in running)
        growing = (
            self._last_running_rss is None or running_rss > self._last_running_rss + GROWTH_BYTES
        )
        self._last_running_rss = running_rss
        previous, self._last_rss = self._last_rss, {a.action_id: a.rss_bytes for a in actions}
        self._last_total = sum(a.rss_bytes for a in actions)

        if limits.ceiling_bytes:
            for action in by_age:
                if action.rss_bytes > limits.ceiling_bytes:
                    return MemoryDecision(
                        short, reason, kill=((action.action_id, "over the hard ceiling", True),)
                    )
        if by_age and by_age[0].frozen_since is not None:
            # the oldest action must run: it was frozen while older ones ran
            return MemoryDecision(short, reason, thaw=(by_age[0].action_id,))
        if reading.available_bytes < limits.floor_bytes and by_age and not settling:
            if frozen:
                victim = frozen[-1]
            elif len(running) > 1:
                victim = running[-1]
            else:
                victim = running[0]
            why = (
                f"host MemAvailable {reading.available_bytes >> 20} MiB fell under the "
                f"hard floor of {limits.floor_bytes >> 20} MiB"
            )
            return MemoryDecision(True, reason or why, kill=((victim.action_id, why, False),))
        for action in frozen:
            assert action.frozen_since is not None
            if now - action.frozen_since > limits.max_frozen_s:
                why = f"frozen for more than {limits.max_frozen_s:g} s"
                return MemoryDecision(short, reason, kill=((action.action_id, why, False),))
        if short:
            candidates = running[1:]  # never the oldest
            if growing and candidates:
                ranked = sorted(candidates, key=lambda a: (a.over_bytes, a.order), reverse=True)
                grew = [
                    a
                    for a in ranked
                    if a.action_id not in previous
                    or a.rss_bytes > previous[a.action_id] + GROWTH_BYTES
                ]
                victims = grew or ranked[:1]
                self._last_running_rss = running_rss - sum(a.rss_bytes for a in victims)
                return MemoryDecision(short, reason, freeze=tuple(a.action_id for a in victims))
            return MemoryDecision(short, reason)
        if frozen and now - self._last_thaw >= limits.thaw_interval_s:
            candidate = frozen[0]
            room = reading.available_bytes - limits.headroom_bytes
            # a frozen action keeps its memory: thawing it costs only its
            # growth, guessed as what is left of its reservation (>= 64 MiB)
            if room >= max(candidate.reserved_bytes - candidate.rss_bytes, THAW_ROOM_BYTES):
                self._last_thaw = now
                return MemoryDecision(short, reason, thaw=(candidate.action_id,))
        return MemoryDecision(short, reason)
