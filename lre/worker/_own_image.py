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
import threading

__all__ = ["OwnImage", "own_image"]

log = logging.getLogger(__name__)

#: Slack added to the bound: the pages the child touches between the fork
#: and the exec (its stack, the exec's own bookkeeping).
SLACK_BYTES = 1 << 20

_HIDDEN = 1 << 62


def _high_water_bytes() -> int | None:
    """lre's ``VmHWM`` in bytes, or None when it cannot be read."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class OwnImage:
    """See the module docstring. Thread-safe: spawner threads call
    ``before_spawn`` and ``after_spawn`` around each spawn."""

    def __init__(self, *, reset: bool = True) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self._reset = reset
        self._warned = False

    def before_spawn(self) -> None:
        """Reset lre's high-water mark when no spawn is under way."""
        with self._lock:
            if self._in_flight == 0 and self._reset:
                try:
                    with open("/proc/self/clear_refs", "wb", buffering=0) as refs:
                        refs.write(b"5")
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
            high = _high_water_bytes()
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
