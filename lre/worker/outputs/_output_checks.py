"""Checks on what an action left as outputs, made before anything is read.

- Names: REAPI paths are UTF-8. A name (or symlink target) the filesystem
  holds that is not valid UTF-8 fails the action with ``InvalidArgument``
  naming the path, its odd bytes shown escaped (``a\\xffb``), never left
  out silently: a build that lost one of its outputs fails later and
  further from the cause (docs/troubleshooting.md).
- Sizes: ``OutputBudget`` adds up the bytes of every file lre is about to
  read (outputs, files inside output directories, stdout, stderr), each
  judged from its ``fstat``: its apparent size counts towards the total,
  and no one file may have more blocks allocated beyond its size (made with
  ``fallocate``) than the limit either. Over
  ``max_output_bytes`` the action fails with ``ResourceExhausted`` naming
  the file and the limit, before a byte of the file is read: a sparse
  terabyte costs one ``fstat``.
"""

from __future__ import annotations

import os

from lre.errors import InvalidArgument
from lre.worker.outputs._limits import ActionLimits


def printable(path: str) -> str:
    """``path`` as text any message can hold: bytes that are not UTF-8 (held
    as surrogates by ``os`` functions) shown as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def is_utf8(text: str) -> bool:
    """False when ``text`` holds a surrogate (a name from the filesystem
    whose bytes are not valid UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_name(shown: str) -> None:
    """Raise ``InvalidArgument`` when the output path ``shown`` is not UTF-8."""
    if not is_utf8(shown):
        raise InvalidArgument(
            f"output '{printable(shown)}': its name is not valid UTF-8 (REAPI paths are "
            "UTF-8); rename it in the action"
        )


def check_target(shown: str, target: str) -> None:
    """Raise ``InvalidArgument`` when the symlink ``shown`` points at a target
    that is not UTF-8."""
    if not is_utf8(target):
        raise InvalidArgument(
            f"output symlink '{printable(shown)}': its target '{printable(target)}' is not "
            "valid UTF-8 (REAPI paths are UTF-8)"
        )


class OutputBudget:
    """The bytes one action's outputs may still use (see the module docstring)."""

    def __init__(self, limits: ActionLimits) -> None:
        self.limits = limits
        self.total = 0

    def charge(self, what: str, info: os.stat_result) -> None:
        """Count the file ``what`` described by ``info``; raise
        ``ResourceExhausted`` when the outputs are then over the limit."""
        allocated = info.st_blocks * 512
        self.total += info.st_size
        limit = self.limits.max_output_bytes
        if self.total > limit or allocated - info.st_size > limit:
            raise self.limits.output_over_limit(
                printable(what), info.st_size, allocated, self.total
            )
