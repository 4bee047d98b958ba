"""What the dashboard, the events and the log lines call an action."""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["action_summary"]


def action_summary(mnemonic: str, arguments: Sequence[str]) -> str:
    """The client's mnemonic (Bazel sends one, e.g. ``CppCompile``), else the
    base name of the program the command runs (``/usr/bin/gcc`` -> ``gcc``),
    else ``""`` when neither is known (no mnemonic, no arguments)."""
    if mnemonic:
        return mnemonic
    if arguments:
        return os.path.basename(arguments[0])
    return ""
