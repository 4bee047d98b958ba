"""A real BuildGrid 0.4.4 (PyPI, its own venv and PostgreSQL) plus the host
worker, started with the peer harness in ``../shared/tools/peer``.

``BuildGrid.start()`` runs ``start_buildgrid.sh`` on a free port (its
PostgreSQL on port + 1000) and then a watchdog that runs the generated
``stop.sh`` as soon as this test process is gone, so nothing outlives the
test run even when pytest is killed. ``kill_server()`` kills only the bgd
process (the "upstream went away" case); ``stop()`` stops all of it.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: The peer harness: beside the repository in CI (a read-only copy of shared/).
PEER_TOOLS = Path(os.environ.get("LRE_PEER_TOOLS", REPO.parent / "shared" / "tools" / "peer"))

#: The only instance name the harness's config serves.
INSTANCE = "main"


def straight_flags(url: str, *, jobs: int = 8) -> list[str]:
    """Bazel straight against BuildGrid at ``url``, as the team's CI builds:
    where actions run and nothing else; the repository's own flags (none
    here) decide the actions' keys, as they do through lre."""
    return [
        f"--remote_executor={url}",
        f"--remote_instance_name={INSTANCE}",
        "--spawn_strategy=remote",
        f"--jobs={jobs}",
        "--remote_timeout=600",
    ]


def require_peer_tools() -> Path:
    """The peer harness directory; fails in CI (CI=true) when it is missing, else skips."""
    script = PEER_TOOLS / "start_buildgrid.sh"
    if not script.is_file():
        message = (
            f"{script} is missing: the BuildGrid tests need the peer harness "
            "(../shared/tools/peer beside the repository, or LRE_PEER_TOOLS)"
        )
        pytest.skip(message)
    return PEER_TOOLS


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pair() -> int:
    """A free port P whose PostgreSQL port P + 1000 is free too."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port + 1000 < 65536 and _port_free(port + 1000):
            return port
    raise RuntimeError("no free pair of ports (P, P + 1000) found")


class BuildGrid:
    """One BuildGrid with its PostgreSQL and host worker (see the module docstring)."""

    def __init__(self, state: Path, *, workers: int = 2) -> None:
        self.tools = require_peer_tools()
        self.state = state
        self.workers = workers
        self.port = 0
        self.bgd_pid = 0
        self._watchdog: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> BuildGrid:
        """Start (or restart, with an empty CAS and database) and wait until it listens.

        Raises AssertionError with the script's output when it fails.
        """
        if not self.port:
            self.port = free_port_pair()
        env = {**os.environ, "BG_WORKERS": str(self.workers), "BG_INSTANCE": INSTANCE}
        # One start at a time across pytest's workers: on a fresh machine the
        # script makes BuildGrid's shared venv, and two makers at once fail
        # (the second finds the directory half made: "File exists").
        with open("/tmp/lre-start-buildgrid.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            proc = subprocess.run(
                ["bash", str(self.tools / "start_buildgrid.sh"), str(self.port), str(self.state)],
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        assert proc.returncode == 0, f"start_buildgrid.sh failed:\n{proc.stdout}\n{proc.stderr}"
        values = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
        self.bgd_pid = int(values["bgd_pid"])
        if self._watchdog is None:
            # Stops everything once this process is gone (even if pytest is killed).
            self._watchdog = subprocess.Popen(
                [
                    "bash",
                    "-c",
                    f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; "
                    f'[ -f "{self.state}/stop.sh" ] && bash "{self.state}/stop.sh"',
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self

    def server_alive(self) -> bool:
        """Whether bgd runs. A killed bgd can linger as a zombie of this
        process: an lre run in-process with ``portable`` containment may have made
        pytest's worker a child subreaper, so the orphaned bgd was re-parented
        here; it is reaped and counts as gone (else ``running_buildgrid``
        would hand the next test a dead server)."""
        try:
            with open(f"/proc/{self.bgd_pid}/stat", "rb") as stat:
                state = stat.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state in (b"Z", b"X"):
            try:
                os.waitpid(self.bgd_pid, os.WNOHANG)
            except ChildProcessError:
                pass  # another process's zombie: gone all the same
            return False
        return True

    def kill_server(self) -> None:
        """Kill the bgd process at once (SIGKILL): connections drop mid-call."""
        os.kill(self.bgd_pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.server_alive() and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop bgd, the worker and PostgreSQL (what this object started)."""
        stop = self.state / "stop.sh"
        if stop.exists():
            subprocess.run(["bash", str(stop)], capture_output=True, timeout=120, check=False)
        if self._watchdog is not None:
            self._watchdog.kill()
            self._watchdog.wait(10)
            self._watchdog = None

    def log_tail(self, lines: int = 30) -> str:
        out = []
        for name in ("bgd.log", "bot.log"):
            path = self.state / name
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {name}\n" + "\n".join(text))
        return "\n".join(out)
