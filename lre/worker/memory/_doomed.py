"""Why an action killed for its memory is not run again, in words for its stderr.

A memory kill that would only repeat (the action passed the hard ceiling, or
it was the last kill ``max_steps`` allows) ends the operation with the killed
run's result: exit code 137 and, appended to the action's own stderr, the
text made here. A client takes that as the action's own failure and does not
retry it (RESOURCE_EXHAUSTED, which it would retry, made the machine take the
same spike again and again), and the user reads in the build's error output
what the peak was, what the ceiling is and how it was worked out, and which
setting raises it.

``MemoryCeiling`` is how the worker worked out its hard ceiling;
``doomed_explanation`` never fails.
"""

from __future__ import annotations

from dataclasses import dataclass

from lre.scheduler import Lease, MemoryExceeded, memory_text

__all__ = ["BUDGET_KEY", "MemoryCeiling", "doomed_explanation"]

#: The config key (and ``lre up`` flag) that raises the hard ceiling.
BUDGET_KEY = "workers[].local.resources.memory_budget"
_BUDGET_FLAG = "lre up --memory-budget SIZE"
_LADDER_KEY = "schedulers[].simple.resources.ladder"
_STEPS_KEY = "schedulers[].simple.resources.max_steps"


@dataclass(frozen=True, slots=True)
class MemoryCeiling:
    """The worker's hard ceiling: ``top_bytes`` (the memory budget, or the last
    ladder step when there is no budget: ``from_budget``) x ``kill_factor``."""

    top_bytes: int
    from_budget: bool
    kill_factor: float

    @property
    def ceiling_bytes(self) -> int:
        return int(self.top_bytes * self.kill_factor)

    def computed(self) -> str:
        """How the ceiling is worked out, with the figures."""
        if self.ceiling_bytes <= 0:
            return "no hard ceiling (no memory budget and no ladder)"
        top_text = memory_text(self.top_bytes)
        top = (
            f"the memory budget {top_text} ({BUDGET_KEY})"
            if self.from_budget
            else f"the last ladder step {top_text} ({_LADDER_KEY}; no memory budget)"
        )
        return f"{memory_text(self.ceiling_bytes)} = {top} x kill_factor {self.kill_factor:g}"


def doomed_explanation(lease: Lease, killed: MemoryExceeded, ceiling: MemoryCeiling) -> str:
    """The lines appended to the stderr of ``lease``'s action, killed by lre
    for the last time (``killed.final``: over the ceiling; else the last kill
    ``max_steps`` allows)."""
    peak = memory_text(killed.peak_rss_bytes)
    kills = lease.memory_kills + 1
    if killed.final:
        what = (
            f"its memory reached {peak} (peak RSS of its processes), over the hard "
            f"ceiling of {ceiling.computed()}. It is not run again: it would pass the "
            "ceiling again."
        )
    else:
        why = f" ({killed.reason})" if killed.reason else ""
        held = "a whole worker" if lease.exclusive else memory_text(lease.reservation.memory_bytes)
        what = (
            f"memory was short{why} and this was kill {kills}, the last that "
            f"{_STEPS_KEY} allows; it reached {peak} (peak RSS of its processes) "
            f"reserving {held}. The hard ceiling is {ceiling.computed()}. It is not "
            "run again."
        )
    return (
        f"\nlre: killed this action (exit code 137, SIGKILL): {what}\n"
        f"lre: to let it run, give actions more memory: {_BUDGET_FLAG}, or the config "
        f"key {BUDGET_KEY} (every running action together reserves at most the budget, "
        "and one action may use it x kill_factor); or make the action use less.\n"
    )
