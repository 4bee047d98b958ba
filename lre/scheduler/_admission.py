"""Memory admission: an action starts only if its memory reservation fits.

Two checks, both on the scheduler's Trio thread (cheap):

1. Budget: the sum of running actions' memory reservations stays within the
   budget (``resources.memory_budget`` in bytes, ``"auto"`` worked out by
   config: ``lre.config.WorkerResources.memory_budget_bytes``; ``0`` = no
   budget, as in the unbounded benchmark configuration).
2. Live veto (``resources.live_memory_veto``): no start while the host's
   available memory (``psutil.virtual_memory().available``, read at most every
   ``live_cache_s``) is below the reservation, so other programs' memory use
   counts too.

Progress guarantee: when nothing is reserved, any action is admitted (also one
larger than the budget: it runs alone), because waiting could never make room.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

__all__ = ["AdmissionDecision", "MemoryAdmission"]


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """``admit`` or not, and why not (for logs and the TUI)."""

    admit: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class AdmissionStatistics:
    budget_bytes: int
    reserved_bytes: int
    running: int
    vetoed_live: int
    vetoed_budget: int


class MemoryAdmission:
    """Tracks reserved memory against the budget. Not thread-safe (Trio thread)."""

    def __init__(
        self,
        budget_bytes: int,
        *,
        live_memory_veto: bool = True,
        available_bytes: Callable[[], int] | None = None,
        live_cache_s: float = 0.1,
    ) -> None:
        if budget_bytes < 0:
            raise ValueError(f"resources.memory_budget must be >= 0, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self.live_memory_veto = live_memory_veto
        self._available = available_bytes or (lambda: int(psutil.virtual_memory().available))
        self._live_cache_s = live_cache_s
        self._live_value = 0
        self._live_read_at = -1e9
        self.reserved_bytes = 0
        self.running = 0
        self._vetoed_live = 0
        self._vetoed_budget = 0

    @property
    def left_bytes(self) -> int | None:
        """Budget not reserved (None when there is no budget)."""
        return None if self.budget_bytes == 0 else self.budget_bytes - self.reserved_bytes

    def available_bytes(self) -> int:
        """The host's available memory (cached for ``live_cache_s``)."""
        now = time.monotonic()
        if now - self._live_read_at >= self._live_cache_s:
            self._live_value = self._available()
            self._live_read_at = now
        return self._live_value

    def check(self, memory_bytes: int) -> AdmissionDecision:
        """Would an action reserving ``memory_bytes`` be admitted now?"""
        if self.running == 0:
            return AdmissionDecision(True)
        left = self.left_bytes
        if left is not None and memory_bytes > left:
            self._vetoed_budget += 1
            return AdmissionDecision(
                False, f"memory budget: {memory_bytes} B reserved asked, {left} B left"
            )
        if self.live_memory_veto:
            available = self.available_bytes()
            if available < memory_bytes:
                self._vetoed_live += 1
                return AdmissionDecision(
                    False, f"host memory: {memory_bytes} B asked, {available} B available"
                )
        return AdmissionDecision(True)

    def fits(self, memory_bytes: int) -> bool:
        return self.check(memory_bytes).admit

    def reserve(self, memory_bytes: int) -> None:
        """Count a started action (call after a positive :meth:`check`)."""
        if memory_bytes < 0:
            raise ValueError(f"memory reservation must be >= 0, got {memory_bytes}")
        self.reserved_bytes += memory_bytes
        self.running += 1
        # the action will use memory soon: do not trust a reading from before it
        self._live_read_at = -1e9

    def release(self, memory_bytes: int) -> None:
        """Count a finished action. Raises ``ValueError`` on a release without reserve."""
        if self.running <= 0 or memory_bytes > self.reserved_bytes:
            raise ValueError(
                f"memory release of {memory_bytes} B without a matching reserve "
                f"(reserved {self.reserved_bytes} B by {self.running} action(s))"
            )
        self.reserved_bytes -= memory_bytes
        self.running -= 1

    def statistics(self) -> AdmissionStatistics:
        return AdmissionStatistics(
            budget_bytes=self.budget_bytes,
            reserved_bytes=self.reserved_bytes,
            running=self.running,
            vetoed_live=self._vetoed_live,
            vetoed_budget=self._vetoed_budget,
        )
