"""The memory ladder: where an action that outgrew its reservation runs next.

Steps are numbered like ``Lease.ladder_step``: 0 is the initial reservation
(asked, learned or cold), ``n`` (1..len(rungs)) is ``rungs[n-1]``, and
``len(rungs) + 1`` is the whole worker (the action runs alone with the whole
memory budget). An action is killed when its sampled RSS passes its step's
memory x ``kill_factor``; it then moves to the lowest rung larger than what it
had. After ``max_steps`` kills, or a kill at the whole-worker step, it fails
with RESOURCE_EXHAUSTED (:meth:`MemoryLadder.exhausted`). Pure: no I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from lre.config import ResourceSpec
from lre.errors import ResourceExhausted

__all__ = ["LadderStep", "MemoryLadder", "format_bytes"]


def format_bytes(n: int) -> str:
    """``536870912`` -> ``"512 MiB"``, ``1610612736`` -> ``"1.5 GiB"``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"


@dataclass(frozen=True, slots=True)
class LadderStep:
    """One rung: ``index`` as in ``Lease.ladder_step``, the memory it reserves, and
    whether it is the whole worker (the action must run alone)."""

    index: int
    memory_bytes: int
    whole_worker: bool = False

    def describe(self) -> str:
        size = format_bytes(self.memory_bytes)
        return f"whole worker ({size})" if self.whole_worker else size


class MemoryLadder:
    """Decides the next memory reservation after a kill. Raises ``ValueError`` for
    rungs that are not positive and strictly increasing, ``max_steps`` < 1 or
    ``kill_factor`` < 1."""

    def __init__(
        self,
        rungs: Sequence[int],
        *,
        max_steps: int,
        kill_factor: float,
        whole_worker_bytes: int,
    ) -> None:
        rungs = tuple(int(r) for r in rungs)
        if any(r <= 0 for r in rungs) or any(b <= a for a, b in itertools.pairwise(rungs)):
            raise ValueError(f"resources.ladder must be positive and increasing, got {rungs}")
        if max_steps < 1:
            raise ValueError(f"resources.max_steps must be >= 1, got {max_steps}")
        if kill_factor < 1:
            raise ValueError(f"resources.kill_factor must be >= 1, got {kill_factor}")
        self.rungs = rungs
        self.max_steps = max_steps
        self.kill_factor = kill_factor
        self.whole_worker_bytes = whole_worker_bytes

    @classmethod
    def from_spec(cls, spec: ResourceSpec, whole_worker_bytes: int) -> MemoryLadder:
        """``whole_worker_bytes``: the worker's memory budget (what "runs alone" reserves)."""
        return cls(
            spec.ladder,
            max_steps=spec.max_steps,
            kill_factor=spec.kill_factor,
            whole_worker_bytes=whole_worker_bytes,
        )

    @property
    def whole_worker_index(self) -> int:
        return len(self.rungs) + 1

    def step(self, index: int, initial_bytes: int) -> LadderStep:
        """The step ``index`` for an action whose initial reservation is
        ``initial_bytes`` (a rung never reserves less than the initial amount)."""
        if index <= 0:
            return LadderStep(0, initial_bytes)
        if index >= self.whole_worker_index:
            return LadderStep(self.whole_worker_index, self.whole_worker_bytes, whole_worker=True)
        return LadderStep(index, max(initial_bytes, self.rungs[index - 1]))

    def start(self, initial_bytes: int, learned_step: int = 0) -> LadderStep:
        """Where a run starts: the learned step of its kind, else step 0."""
        return self.step(learned_step, initial_bytes)

    def kill_line(self, step: LadderStep) -> int:
        """RSS above which the action is killed: the step's memory x kill_factor."""
        return math.floor(step.memory_bytes * self.kill_factor)

    def after_kill(self, current: LadderStep, kills: int) -> LadderStep | None:
        """The step after the ``kills``-th kill (counting this one), or None when
        the action must fail: ``kills >= max_steps`` or it already had the whole
        worker. The next step is the lowest rung above ``current.memory_bytes``;
        past the top rung, the whole worker."""
        if kills >= self.max_steps or current.whole_worker:
            return None
        for index, rung in enumerate(self.rungs, start=1):
            if index > current.index and rung > current.memory_bytes:
                return LadderStep(index, rung)
        return self.step(self.whole_worker_index, current.memory_bytes)

    def exhausted_message(self, peak_rss_bytes: int, tried: Sequence[LadderStep]) -> str:
        """The final error text: peak RSS and every reservation tried, in order."""
        steps = ", ".join(s.describe() for s in tried) or "none"
        return (
            f"action exceeded its memory reservation {len(tried)} time(s) and was not retried "
            f"further: peak RSS {format_bytes(peak_rss_bytes)}; memory reservations tried: "
            f"{steps} (killed above each x {self.kill_factor:g}). Ask for more with the "
            f"platform property memory_kb, or raise the worker's resources.ladder / "
            f"resources.max_steps"
        )

    def exhausted(self, peak_rss_bytes: int, tried: Sequence[LadderStep]) -> ResourceExhausted:
        """The RESOURCE_EXHAUSTED error to end the operation with."""
        return ResourceExhausted(self.exhausted_message(peak_rss_bytes, tried))
