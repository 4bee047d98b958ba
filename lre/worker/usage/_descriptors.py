"""lre's reserve of file descriptors, and samples skipped without them.

lre's soft ``RLIMIT_NOFILE`` stays ``RESERVE`` below its hard limit
(``keep_reserve``, at start): whatever opens descriptors in lre (gRPC's
accepted connections, stores, actions' staging) meets ``EMFILE`` while
that many are still to be had. ``using_reserve(fn)`` runs one call of lre's
own upkeep (the host's memory reading, the history's sample, the sampler's
listing of ``/proc``) and, when it meets ``EMFILE``, raises the soft limit
to the hard one for a second try, then lowers it again: those readings go
on while clients hold every descriptor lre would otherwise give them
(another thread may take some of the reserve in that moment; the second
try then fails as the first did). Each listener also bounds the connections
it holds (``listener.max_connections``); gRPC has no bound per peer, so the
reserve is what keeps lre's upkeep going whatever holds the rest.

``SkipLog`` says once that a periodic task skipped its work for want of
descriptors, and once that it works again, instead of a line per period.
Nothing here raises but what ``fn`` raises.
"""

from __future__ import annotations

import errno
import logging
import resource
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["RESERVE", "SkipLog", "keep_reserve", "using_reserve"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Descriptors kept between lre's soft and hard limits for its own upkeep.
RESERVE = 128
#: A soft limit below this is not lowered further for a reserve.
_LEAST = 256

_lock = threading.Lock()


def keep_reserve(reserve: int = RESERVE) -> int:
    """Lower the soft ``RLIMIT_NOFILE`` to ``reserve`` below the hard limit
    when it is closer to it (never under 256 for this); the reserve kept
    (0 with no hard limit, or one too low to share). A refusal by the
    kernel is logged, never raised."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard - reserve < _LEAST:
        return 0
    target = hard - reserve if soft == resource.RLIM_INFINITY else min(soft, hard - reserve)
    if target != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as error:
            log.warning("cannot keep a reserve of open files below the hard limit: %s", error)
            return 0
    return hard - target


def using_reserve(fn: Callable[[], T]) -> T:
    """``fn()``; on ``EMFILE`` once more with the soft limit raised to the
    hard one meanwhile (see the module docstring). Raises what ``fn``
    raises."""
    try:
        return fn()
    except OSError as error:
        if error.errno != errno.EMFILE:
            raise
    with _lock:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == hard:
            return fn()
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        try:
            return fn()
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class SkipLog:
    """One warning when ``what`` is first skipped for want of descriptors,
    one line when it works again (see the module docstring)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.skipped = 0

    def skip(self, error: OSError) -> None:
        self.skipped += 1
        if self.skipped == 1:
            log.warning(
                "%s: skipped, out of file descriptors (%s); lre keeps serving and "
                "tries again each period",
                self.what,
                error.strerror or error,
            )

    def ok(self) -> None:
        if self.skipped:
            log.warning("%s: works again after %d skipped", self.what, self.skipped)
            self.skipped = 0
