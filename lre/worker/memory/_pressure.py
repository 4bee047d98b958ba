"""Reading the host's memory state, and what admission may still start.

``PressureMonitor.read()`` returns a ``MemoryReading``: MemAvailable from
``/proc/meminfo`` and PSI's ``full avg10`` from ``/proc/pressure/memory``
(None where the kernel has no PSI or the file cannot be read). A reading is
cached for ``cache_s``.

The monitor also carries the shortage state the worker's memory control sets
(``set_state``), so that the scheduler's admission (``room_bytes``, given to
the scheduler as its ``available_memory``) starts nothing while memory is short
or an action is frozen, and otherwise only what fits above the headroom.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from lre.errors import out_of_descriptors
from lre.worker.memory._governor import MemoryReading
from lre.worker.usage import SkipLog, using_reserve

__all__ = ["PressureMonitor", "read_mem_available", "read_pressure_full_avg10"]

log = logging.getLogger(__name__)

MEMINFO = "/proc/meminfo"
PSI_MEMORY = "/proc/pressure/memory"


def read_mem_available(path: str = MEMINFO) -> int:
    """MemAvailable in bytes. Raises ``OSError`` when the file cannot be read
    and ``ValueError`` when it has no MemAvailable line."""
    with open(path, "rb") as file:
        for line in file:
            if line.startswith(b"MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise ValueError(f"{path}: no MemAvailable line")


def read_pressure_full_avg10(path: str = PSI_MEMORY) -> float | None:
    """PSI's ``full avg10`` (percent), or None when there is no such file or line."""
    try:
        with open(path, "rb") as file:
            for line in file:
                if line.startswith(b"full "):
                    for part in line.split():
                        if part.startswith(b"avg10="):
                            return float(part[6:])
    except (OSError, ValueError):
        return None
    return None


class PressureMonitor:
    """Cached host readings plus the shortage state (Trio thread only).

    ``available`` and ``pressure`` replace the readers (tests pass fixed or
    changing values). ``headroom_bytes``: the memory left to the rest of the
    machine (admission counts only what is above it).
    """

    def __init__(
        self,
        headroom_bytes: int,
        *,
        available: Callable[[], int] | None = None,
        pressure: Callable[[], float | None] | None = None,
        cache_s: float = 0.02,
    ) -> None:
        self.headroom_bytes = headroom_bytes
        self._available = available or read_mem_available
        self._pressure = pressure or read_pressure_full_avg10
        self._cache_s = cache_s
        self._reading = MemoryReading(0)
        self._read_at = -1e18
        #: Why memory is short now ("" = it is not), set by the memory control.
        self.short_reason = ""
        #: Actions frozen now (set by the memory control).
        self.frozen = 0
        self._skips = SkipLog("memory reading (/proc/meminfo)")

    def read(self) -> MemoryReading:
        """The host's state now (cached for ``cache_s``). Out of file
        descriptors even with lre's reserve (``_descriptors``), the last
        reading stands (logged once) until one succeeds again."""
        now = time.monotonic()
        if now - self._read_at >= self._cache_s:
            try:
                available = using_reserve(self._available)
            except OSError as error:
                if not out_of_descriptors(error):
                    raise
                self._skips.skip(error)
                self._read_at = now
                return self._reading
            self._skips.ok()
            self._reading = MemoryReading(available, self._pressure())
            self._read_at = now
        return self._reading

    @property
    def last_reading(self) -> MemoryReading:
        """The latest reading, without reading again (for statistics); the
        first call before any ``read`` reads once, so a fresh lre does not
        report 0 bytes available until its first action is sampled."""
        if self._read_at == -1e18:
            return self.read()
        return self._reading

    def set_state(self, short_reason: str, frozen: int) -> None:
        self.short_reason = short_reason
        self.frozen = frozen

    def room_bytes(self) -> int:
        """Memory new actions may still take: 0 while memory is short or an
        action is frozen, else MemAvailable minus the headroom."""
        if self.short_reason or self.frozen:
            return 0
        return max(0, self.read().available_bytes - self.headroom_bytes)
