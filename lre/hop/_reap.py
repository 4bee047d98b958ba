"""``reap``: wait for a child process lre asked to exit, killing it if it lingers."""

from __future__ import annotations

import subprocess
from typing import Any


def reap(process: subprocess.Popen[Any], grace_s: float = 5.0) -> None:
    """Wait up to ``grace_s`` for ``process`` to exit, then kill it and wait
    for that; never raises for a process that was slow to go."""
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
