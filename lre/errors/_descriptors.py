"""Running out of file descriptors: the request at hand fails, lre goes on.

``EMFILE`` (lre's own ``RLIMIT_NOFILE`` reached) and ``ENFILE`` (the
system's table full) can meet any open, accept or socket call of lre's
while something holds many descriptors (a client opening thousands of
connections, say). Such an error is never lre's defect and never a reason
to stop: ``descriptors_exhausted(error)`` is the ``ResourceExhausted`` a
request then fails with (clients retry it), or None for any other error.
"""

from __future__ import annotations

import errno

from lre.errors._errors import ResourceExhausted

__all__ = ["descriptors_exhausted", "out_of_descriptors"]

_WHY = {
    errno.EMFILE: "lre holds as many open files as its limit allows (EMFILE)",
    errno.ENFILE: "the system's table of open files is full (ENFILE)",
}


def out_of_descriptors(error: BaseException) -> bool:
    """Whether ``error`` is an ``OSError`` of ``EMFILE`` or ``ENFILE``."""
    return isinstance(error, OSError) and error.errno in _WHY


def descriptors_exhausted(error: BaseException) -> ResourceExhausted | None:
    """The error a request fails with for ``error`` when it is
    ``out_of_descriptors``, else None."""
    if not isinstance(error, OSError) or error.errno not in _WHY:
        return None
    return ResourceExhausted(
        f"out of file descriptors: {_WHY[error.errno]}; try again shortly (docs/troubleshooting.md)"
    )
