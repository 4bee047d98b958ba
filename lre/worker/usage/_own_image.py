"""How much of lre's own memory an action's first process carries in its
kernel figure (``ru_maxrss``).

Python starts a child with ``vfork`` (or ``fork``): until it executes its
program the child runs on lre's memory, and the kernel's maximum resident
set of a process (``ru_maxrss``, what ``wait4`` reports) keeps the largest
image the process ever had, the one from before its ``exec`` included. So
the figure ``wait4`` gives for an action's first process is the larger of
lre's resident set at that exec (tens of MiB) and the largest of the
action's own processes. The kernel keeps no separate figure for the
children, so lre cannot take its own image out of it; it can only tell
whether the figure is above that image (then it is the action's own) or
not (then the action's processes stayed below it, by how much is unknown).

``OwnImage`` gives the bound to compare with: lre's high-water mark of
resident memory (``VmHWM``) read right after the spawn returned (the child
had executed its program by then), which is at least what the child
carried. To keep the bound close to lre's resident set rather than its
largest ever, the high-water mark is reset (``/proc/self/clear_refs``,
``5``) before a spawn when no other spawn is under way (a reset during
another spawn could make that spawn's bound too low). Failures to read or
reset are logged once and answer a bound that errs high (never low):
when ``VmHWM`` cannot be read, every kernel figure counts as hidden.
"""

from __future__ import annotations

import logging
import os
import threading

__all__ = ["OwnImage", "own_image"]

log = logging.getLogger(__name__)

#: Slack added to the bound: the pages the child touches between the fork
#: and the exec (its stack, the exec's own bookkeeping).
SLACK_BYTES = 1 << 20

_HIDDEN = 1 << 62


def _high_water_bytes(status: int) -> int | None:
    """lre's ``VmHWM`` in bytes from its open ``/proc/self/status``, or None
    when it cannot be read."""
    try:
        data = os.pread(status, 8192, 0)
        start = data.index(b"\nVmHWM:") + 7
        return int(data[start : data.index(b"kB", start)]) * 1024
    except (OSError, ValueError):
        return None


class OwnImage:
    """See the module docstring. Thread-safe: spawner threads call
    ``before_spawn`` and ``after_spawn`` around each spawn."""

    def __init__(self, *, reset: bool = True) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self._reset = reset
        self._warned = False
        # opened at the first spawn, kept (a read and a write per spawn)
        self._status = -1
        self._clear_refs = -1

    def before_spawn(self) -> None:
        """Reset lre's high-water mark when no spawn is under way."""
        with self._lock:
            if self._in_flight == 0 and self._reset:
                try:
                    if self._clear_refs < 0:
                        self._clear_refs = os.open(
                            "/proc/self/clear_refs", os.O_WRONLY | os.O_CLOEXEC
                        )
                    os.write(self._clear_refs, b"5")
                except OSError as error:
                    self._reset = False
                    log.info(
                        "lre cannot reset its memory high-water mark (%s): short actions' "
                        "kernel figures are compared with lre's largest resident set",
                        error,
                    )
            self._in_flight += 1

    def after_spawn(self) -> int:
        """The bound for the spawn just made (its child has executed its
        program): bytes of lre's image its ``ru_maxrss`` may carry."""
        with self._lock:
            self._in_flight -= 1
            if self._status < 0:
                try:
                    self._status = os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    self._status = -1
            high = _high_water_bytes(self._status) if self._status >= 0 else None
        if high is None:
            if not self._warned:
                self._warned = True
                log.warning("lre cannot read its own VmHWM: kernel memory figures are not used")
            return _HIDDEN
        return high + SLACK_BYTES


_OWN_IMAGE = OwnImage()


def own_image() -> OwnImage:
    """The process-wide ``OwnImage`` (one lre, one image)."""
    return _OWN_IMAGE
