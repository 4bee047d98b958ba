"""Attacks through connectable sockets of the host, from inside a real action.

A Unix socket named by a path stays connectable on a read-only mount, so a
server of lre's user that runs commands for whoever connects (here a tmux
server: ``tmux run-shell``) would act for the action outside its view. Each
lre (``test_view_attacks._start``, one per setup) finds two tmux servers of
its own user with their sockets in ``/run/user/<uid>/``, where such servers
keep them, and hands one in through ``sandbox_visible_sockets``: the view
must hide the other (the action's ``tmux`` reports the failed connect and
the server never runs the command) and show the one handed in (its command
runs: the allow-list works, and the action's ``tmux`` really reaches a
server when it may).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._support.ci import in_ci
from tests._support.lre_as import SETUPS, python_for
from tests.worker.test_view_attacks import Lre, _sh, _start, _verdict

#: (backend, lre's user, action_user): the shape attack_report.describe reads.
_SETUPS = tuple((b, i, "root") for b, i in SETUPS)


@dataclass
class Servers:
    """Two tmux servers of one user and where their commands leave marks."""

    #: Its socket's directory is hidden from actions.
    hidden: Path
    #: Handed in through ``sandbox_visible_sockets``.
    handed: Path
    #: A directory the servers write (outside /tmp: the view hides /tmp).
    marks: Path


def _tmux() -> str:
    tmux = shutil.which("tmux")
    if tmux is None:
        if in_ci():
            pytest.fail("tmux is needed to attack through a multiplexer's socket")
        pytest.skip("tmux is not installed")
    return tmux


def _as(identity: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    prefix, env = python_for(identity)
    # nobody's login shell refuses to run anything: tmux runs its session
    # and run-shell's commands with $SHELL.
    env = {**env, "SHELL": "/bin/sh"}
    return subprocess.run(
        [*prefix[:-1], *argv], env=env, capture_output=True, text=True, timeout=60, check=False
    )


@contextmanager
def _servers(identity: str) -> Iterator[Servers]:
    """Start two tmux servers as ``identity`` with their sockets in a fresh
    directory under ``/run/user/<uid>`` (made when missing: nobody has none,
    and removed afterwards when empty); kill them and remove it all at the end."""
    tmux = _tmux()
    entry = pwd.getpwnam("nobody") if identity == "nobody" else pwd.getpwuid(os.geteuid())
    runtime = Path(f"/run/user/{entry.pw_uid}")
    made = not runtime.exists()
    if made:
        runtime.mkdir(mode=0o700, parents=True)
        os.chown(runtime, entry.pw_uid, entry.pw_gid)
    where = Path(tempfile.mkdtemp(prefix="lre-attack-sockets-", dir=runtime))
    marks = Path(tempfile.mkdtemp(prefix="lre-attack-marks-", dir="/var/tmp"))
    for path in (where, marks):
        os.chown(path, entry.pw_uid, entry.pw_gid)
    servers = Servers(where / "hidden.sock", where / "handed.sock", marks)
    try:
        for socket in (servers.hidden, servers.handed):
            started = _as(identity, [tmux, "-f", "/dev/null", "-S", str(socket),
                                     "new-session", "-d", "sleep 600"])  # fmt: skip
            assert started.returncode == 0, started.stderr
        yield servers
    finally:
        for socket in (servers.hidden, servers.handed):
            _as(identity, [tmux, "-S", str(socket), "kill-server"])
        shutil.rmtree(marks, ignore_errors=True)
        shutil.rmtree(where, ignore_errors=True)
        if made:  # unless another test (another xdist worker) uses it meanwhile
            with contextlib.suppress(OSError):
                runtime.rmdir()


@dataclass
class Setup:
    lre: Lre
    servers: Servers


@pytest.fixture(scope="module", params=_SETUPS, ids=[f"{b}-{i}-actions-{a}" for b, i, a in _SETUPS])
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    backend, identity, action_user = request.param
    with _servers(identity) as servers:
        extra = f', sandbox_visible_sockets: ["{servers.handed}"]'
        for lre in _start(backend, identity, action_user, extra):
            yield Setup(lre, servers)


def _run_shell(lre: Lre, socket: Path, mark: Path) -> tuple[int, str]:
    """The action asks the tmux server at ``socket`` to create ``mark``:
    the action's exit code and its output."""
    script = f"tmux -S {socket} run-shell 'touch {mark}' 2>&1"
    code, out, _ = _sh(lre, script)
    return code, out.decode(errors="replace")


def _appears(path: Path, within: float = 10.0) -> bool:
    """Whether ``path`` exists within ``within`` s (a server runs the
    command a moment after its client returns)."""
    deadline = time.monotonic() + within
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.attack("sockets: an action has a tmux server of lre's user run a command")
def test_a_multiplexer_of_lres_user_runs_nothing_for_an_action(setup: Setup) -> None:
    mark = setup.servers.marks / "ran-for-the-action"
    code, out = _run_shell(setup.lre, setup.servers.hidden, mark)
    ran = _appears(mark, within=2.0)
    if setup.lre.backend == "portable":
        # No view: the socket is there and the server obeys.
        _verdict(setup.lre, "tmux-run-shell", not ran, out, missing=True)
        return
    _verdict(setup.lre, "tmux-run-shell", not ran, out, missing=False)
    # The attack really ran: the action's tmux tried and could not connect.
    assert code != 0, out
    assert "error connecting" in out or "no server running" in out, out


def test_a_socket_handed_in_is_reachable(setup: Setup) -> None:
    mark = setup.servers.marks / "ran-through-the-handed-socket"
    code, out = _run_shell(setup.lre, setup.servers.handed, mark)
    assert code == 0, out
    assert _appears(mark), out
