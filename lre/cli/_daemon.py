"""The pid file of a running lre, and starting/stopping a detached one.

One pid file per state directory: ``{state_dir}/lre.json`` holding the pid,
the bound gRPC and status addresses, the repo it wrote client config into and
the log file. It is written by the server once it listens (so its presence
means "ready") and removed when it stops. Beside it the server writes a fresh
``admin.token`` at every start, which its status listener's POST routes ask for.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from lre.cli._state_file import write_state_file
from lre.config import ADMIN_TOKEN_FILE

PID_FILE = "lre.json"
LOG_FILE = "lre.log"


@dataclass(frozen=True, slots=True)
class RunningServer:
    """What a running lre wrote into its pid file."""

    pid: int
    grpc_address: str
    status_address: str
    repo: str
    log_file: str
    started: float
    #: How clients reach the first gRPC listener (for the client config of
    #: repositories linked while it runs): its TLS certificate, whether it
    #: asks for client certificates, its token file ("" = none).
    tls_cert_file: str = ""
    tls_client_auth: bool = False
    auth_token_file: str = ""
    #: Platform properties the client config sends (``client_exec_properties``
    #: of the server's config); None = lre's own defaults.
    exec_properties: dict[str, str] | None = None

    def alive(self) -> bool:
        """True when the process still exists and is an lre (not a reused pid)."""
        try:
            proc = psutil.Process(self.pid)
            return (
                proc.is_running()
                and proc.status() != psutil.STATUS_ZOMBIE
                and (abs(proc.create_time() - self.started) < 5)
            )
        except psutil.Error:
            return False


def pid_file(state_dir: Path) -> Path:
    return state_dir / PID_FILE


def write_pid_file(state_dir: Path, server: RunningServer) -> None:
    """Atomically write the pid file (0600)."""
    write_state_file(state_dir, PID_FILE, json.dumps(asdict(server)))


def read_pid_file(state_dir: Path) -> RunningServer | None:
    """The recorded server, or None when there is no (readable) pid file."""
    try:
        data = json.loads(pid_file(state_dir).read_text(encoding="utf-8"))
        return RunningServer(**data)
    except (OSError, ValueError, TypeError):
        return None


def remove_pid_file(state_dir: Path, pid: int) -> None:
    """Remove the pid file if it still names ``pid``."""
    current = read_pid_file(state_dir)
    if current is not None and current.pid == pid:
        try:
            pid_file(state_dir).unlink()
        except FileNotFoundError:
            pass


def stop_server(server: RunningServer, *, timeout: float = 30.0) -> bool:
    """SIGTERM the server and wait for it to exit; SIGKILL after ``timeout``.

    Returns True when it exited by itself after SIGTERM.
    """
    try:
        proc = psutil.Process(server.pid)
        proc.send_signal(signal.SIGTERM)
    except psutil.NoSuchProcess:
        return True
    if _gone_within(proc, timeout):
        return True
    with contextlib.suppress(psutil.Error):
        proc.kill()
    _gone_within(proc, 10)
    return False


def _gone_within(proc: psutil.Process, timeout: float) -> bool:
    """Whether ``proc`` (not our child: polled, never waited for) is gone or a
    zombie within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def wait_for_pid_file(state_dir: Path, child: psutil.Process, timeout: float) -> RunningServer:
    """Wait until the detached child has written its pid file.

    Raises RuntimeError when the child exits first or ``timeout`` passes.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        server = read_pid_file(state_dir)
        if server is not None and server.pid == child.pid:
            return server
        if not child.is_running() or child.status() == psutil.STATUS_ZOMBIE:
            raise RuntimeError(f"lre exited during start-up (status {child.wait(1)})")
        time.sleep(0.05)
    raise RuntimeError(f"lre did not become ready within {timeout:.0f} s")


def name_process(name: str = "lre") -> None:
    """Show this process as ``name`` in ps, top and pgrep (its ``comm``), not
    ``python3``. Linux only; elsewhere (or when /proc is not writable)
    nothing happens."""
    try:
        with open("/proc/self/comm", "w", encoding="ascii") as comm:
            comm.write(name[:15])
    except OSError:
        pass


def read_admin_token(state_dir: Path) -> str:
    """The running lre's admin token; ``OSError`` when it cannot be read."""
    return (state_dir / ADMIN_TOKEN_FILE).read_text(encoding="ascii").strip()


def post_admin(
    server: RunningServer, route: str, query: str, token: str, *, timeout: float
) -> bytes:
    """POST ``route?query`` to ``server``'s status listener; the answer's body.
    Raises ``OSError`` when it does not answer or answers an error status,
    ``ValueError`` when its address is malformed."""
    request = urllib.request.Request(
        f"http://{server.status_address}{route}" + (f"?{query}" if query else ""),
        data=b"",
        method="POST",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        body: bytes = reply.read()
    return body
