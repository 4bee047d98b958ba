"""Running the ``lre`` command line as a user does, from tests."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path


def run_lre(
    *args: str, cwd: Path, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m lre ARGS`` in ``cwd``; output captured as text, never raises on exit status."""
    return subprocess.run(
        [sys.executable, "-m", "lre", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
