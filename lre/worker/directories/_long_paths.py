"""Paths longer than the kernel takes in one call (``PATH_MAX``).

An action may make a tree deeper than ``PATH_MAX`` (4096 bytes on Linux)
below its input root: each name is short, only the whole path is too long
for any call that takes a path (``ENAMETOOLONG``). lre reaches such files
one name at a time from directory descriptors (``_beneath.open_beneath``
falls back to its walk, and an output there is copied into the CAS through
its descriptor instead of moved by path). What still cannot be done (an
input or output path of the request too long to create in the action's
directory) is the request's own doing, never lre's: ``too_long`` turns it
into ``InvalidArgument`` naming the path, so the action fails once, is not
retried and does not pause the worker.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable

from lre.errors import InvalidArgument

__all__ = ["PATH_MAX", "fits", "too_long"]

#: The longest path (bytes, with its terminating NUL) one call takes on Linux.
PATH_MAX = 4096
#: Characters of a path shown at each end when a message holds it.
_SHOWN = 120


def fits(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` can be handed to a call that takes a path."""
    return len(os.fsencode(path)) < PATH_MAX


def _shortened(path: str) -> str:
    text = os.fsencode(path).decode("utf-8", "backslashreplace")
    if len(text) <= 2 * _SHOWN + 3:
        return text
    return f"{text[:_SHOWN]}...{text[-_SHOWN:]}"


def too_long(
    error: BaseException, base: str | os.PathLike[str] = "", outputs: Iterable[str] = ()
) -> InvalidArgument | None:
    """``InvalidArgument`` for an ``OSError`` that is ``ENAMETOOLONG``,
    naming its path relative to ``base`` when below it, or the first of
    ``outputs`` (paths relative to ``base``) at or below that path (the
    middle left out of a path of thousands of characters); else None."""
    if not isinstance(error, OSError) or error.errno != errno.ENAMETOOLONG:
        return None
    path = os.fsdecode(error.filename) if error.filename is not None else ""
    prefix = os.fspath(base).rstrip("/") + "/" if base else ""
    if prefix and path.startswith(prefix):
        path = path[len(prefix) :]
    what = "the path"
    output = next((o for o in outputs if path and (o == path or o.startswith(path + "/"))), None)
    if output is not None:
        what, path = "the output path", output
    size = len(os.fsencode(path))
    named = f" {_shortened(path)!r} ({size} bytes)" if path else ""
    return InvalidArgument(
        f"{what}{named} is too long: with the action's directory in front it passes "
        f"this system's PATH_MAX ({PATH_MAX} bytes), so lre cannot create or store it; "
        "use a shallower tree"
    )
