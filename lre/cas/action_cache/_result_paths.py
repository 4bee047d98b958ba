"""Checks on the paths inside an ``ActionResult`` before it is cached.

A result in the action cache is served to every client of the instance (and,
with an upstream, to a whole team), so a poisoned one must not be able to
steer a client outside its output tree: output paths are relative, without
empty, ``.`` or ``..`` components, and symlink targets stay inside the
output root (lre advertises ``symlink_absolute_path_strategy: DISALLOWED``).
"""

from __future__ import annotations

import posixpath

from lre.errors import InvalidArgument
from lre.proto import re_pb2


def check_output_path(path: str, *, field: str) -> None:
    """Raise ``InvalidArgument`` naming ``field`` unless ``path`` is a clean
    relative path."""
    if not path:
        raise InvalidArgument(f"{field}: empty path")
    if "\0" in path:
        raise InvalidArgument(f"{field}: {path!r} contains NUL")
    if path.startswith("/"):
        raise InvalidArgument(f"{field}: {path!r} is absolute; output paths are relative")
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise InvalidArgument(f"{field}: {path!r} has an empty, '.' or '..' component")


def check_symlink_target(path: str, target: str, *, field: str) -> None:
    """Raise ``InvalidArgument`` naming ``field`` when ``target`` (of the
    symlink at ``path``) is absolute or leads outside the output root."""
    if not target or "\0" in target:
        raise InvalidArgument(f"{field}: invalid symlink target {target!r}")
    if target.startswith("/"):
        raise InvalidArgument(
            f"{field}: absolute symlink target {target!r} (this server disallows them)"
        )
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if resolved == ".." or resolved.startswith("../"):
        raise InvalidArgument(
            f"{field}: symlink {path!r} -> {target!r} leads outside the output root"
        )


def check_result_paths(result: re_pb2.ActionResult) -> None:
    """Check every output path and symlink target of ``result``."""
    for i, output_file in enumerate(result.output_files):
        check_output_path(output_file.path, field=f"output_files[{i}].path")
    for i, output_dir in enumerate(result.output_directories):
        check_output_path(output_dir.path, field=f"output_directories[{i}].path")
    for name in ("output_symlinks", "output_file_symlinks", "output_directory_symlinks"):
        for i, link in enumerate(getattr(result, name)):
            check_output_path(link.path, field=f"{name}[{i}].path")
            check_symlink_target(link.path, link.target, field=f"{name}[{i}].target")
