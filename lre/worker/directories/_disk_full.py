"""A full disk under an action: that request fails, lre goes on.

``request_error(error)`` turns what running one action raised because a disk
filled up (``ENOSPC`` or ``EDQUOT`` from lre's own writes: the action
directory, the linked-inputs journal, the CAS or the action cache) into the
``ResourceExhausted`` that ends that request alone, naming the path when the
error has one. A path the action made too long for any call
(``ENAMETOOLONG``, deeper than ``PATH_MAX``) ends it the same way as
``InvalidArgument`` naming that path (``_long_paths``), and one lre met
out of file descriptors (``EMFILE``, ``ENFILE``) as ``ResourceExhausted``
(``lre.errors.descriptors_exhausted``): final for that request, never an
infrastructure failure that would pause the worker. Several concurrent
writes failing together arrive as an exception group; a group made only of
such failures (and of other ``LreError``s) is answered with its first one.
Anything else gives None and is left to propagate as before.
"""

from __future__ import annotations

import errno
import logging

from lre.errors import LreError, ResourceExhausted, descriptors_exhausted
from lre.worker.directories._long_paths import too_long

__all__ = ["request_error"]

log = logging.getLogger(__name__)

_SPACE = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _mapped(error: BaseException, worker: str) -> LreError | None:
    if isinstance(error, LreError):
        return error
    deep = too_long(error) or descriptors_exhausted(error)
    if deep is not None:
        return deep
    if isinstance(error, OSError) and error.errno in _SPACE:
        where = f" writing {error.filename}" if error.filename else ""
        return ResourceExhausted(
            f"worker {worker}: {_SPACE[error.errno]}{where}; free disk space under lre's "
            "work, state and store directories (nothing already stored was lost)"
        )
    return None


def request_error(error: BaseException, worker: str, operation: str) -> LreError | None:
    """The error to end ``operation`` with (logged), or None (see the module
    docstring)."""
    mapped = [_mapped(leaf, worker) for leaf in _leaves(error)]
    if not mapped or any(m is None for m in mapped):
        return None
    space = [m for m in mapped if isinstance(m, ResourceExhausted)]
    chosen = space[0] if space else mapped[0]
    assert chosen is not None
    log.warning("worker %s: %s: %s", worker, operation, chosen)
    return chosen
