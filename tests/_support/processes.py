"""External tools a test needs, processes found by their command line, and
polling until something holds."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

import psutil
import pytest


def require_tool(name: str) -> str:
    """The path of tool ``name``; skips the test without it (a failure under
    CI, by tests/conftest.py)."""
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


def processes_with(marker: str) -> list[psutil.Process]:
    """Live (non-zombie) processes whose command line contains ``marker``,
    except the first process the containment puts in front of each action,
    whose command line repeats the action's: ``timeout -- 0``, GNU ``time``
    reporting the tree's peak (``_tree_peak.report_argv``) or, in a pidns
    view, the gate's sh (``_pid_namespace._PROC_GATE_PID1``)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = process.info["cmdline"] or []
        if cmdline[1:3] == ["--", "0"] and cmdline[0].endswith("timeout"):
            continue
        if cmdline[1:5] == ["-q", "-f", "%M", "-o"] and cmdline[0].endswith("time"):
            continue
        if cmdline[1:2] == ["-c"] and cmdline[2:3] and cmdline[2].startswith("IFS= read -r gate;"):
            continue
        if process.info["status"] != psutil.STATUS_ZOMBIE and any(marker in a for a in cmdline):
            found.append(process)
    return found


def wait_until(predicate: Callable[[], object], seconds: float = 10.0) -> bool:
    """Poll ``predicate`` every 20 ms for up to ``seconds``; its last truth value."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return bool(predicate())
        time.sleep(0.02)
    return True
