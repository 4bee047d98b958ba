"""Validation of the relative paths a Command names.

``working_directory`` and every output path must stay inside the input root:
no absolute paths, no ``..`` that climbs out, no NUL. Returned paths are
normalised and ``/``-separated; ``""`` stands for the root itself.
"""

from __future__ import annotations

import posixpath

from lre.errors import InvalidArgument


def relative_inside(value: str, *, field: str, allow_root: bool) -> str:
    """Normalise ``value`` as a path relative to the input root.

    Raises ``InvalidArgument`` naming ``field`` and ``value`` when it is
    absolute, contains NUL, climbs out of the root, or (unless
    ``allow_root``) names the root itself.
    """
    if "\x00" in value:
        raise InvalidArgument(f"{field}: {value!r} contains NUL")
    if value.startswith("/"):
        raise InvalidArgument(f"{field}: {value!r} is absolute; it must be relative")
    normal = posixpath.normpath(value) if value else "."
    if normal == ".." or normal.startswith("../"):
        raise InvalidArgument(f"{field}: {value!r} points outside the input root")
    if normal == ".":
        if not allow_root:
            raise InvalidArgument(f"{field}: {value!r} names the input root itself")
        return ""
    return normal


def output_path(working_directory: str, value: str, *, field: str) -> str:
    """The root-relative path of an output named relative to ``working_directory``.

    Raises ``InvalidArgument`` as ``relative_inside`` does.
    """
    if value.startswith("/") or not value:
        raise InvalidArgument(f"{field}: {value!r} must be a non-empty relative path")
    joined = posixpath.join(working_directory, value) if working_directory else value
    return relative_inside(joined, field=field, allow_root=False)
