"""A running action as ``ps`` shows it, under each containment backend.

The action's own process carries exactly the action's argv
(``/proc/<pid>/cmdline``), whatever wraps it, and every wrapper's line
ends with it; where lre starts the wrapper that stays (pid 1 of a
``pidns`` namespace without a view) it reads ``lre-action ... -- <the
action's argv>`` instead of ``/usr/bin/time -q -f %M ...``.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from lre.cli._daemon import read_pid_file
from tests._support.reapi import Client
from tests.cli.running_lre import bazel_repo, detached, private_home

pytestmark = pytest.mark.slow


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as file:
        return [part.decode() for part in file.read().split(b"\0")[:-1]]


def _action_process(argv: list[str], within: float = 30) -> psutil.Process:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for process in psutil.process_iter():
            try:
                if _cmdline(process.pid) == argv:
                    return process
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError(f"no process runs {argv}")


#: Only pidns starts its pid 1 itself both with and without a view; userns
#: always builds its view in its helper, portable has none.
SETUPS = [("pidns", True), ("pidns", False), ("userns", True), ("portable", False)]


@pytest.mark.parametrize(
    ("mode", "view"), SETUPS, ids=[f"{m}-{'view' if v else 'no-view'}" for m, v in SETUPS]
)
def test_a_running_action_shows_its_own_argv_and_lres_wrapper_its_name(
    tmp_path: Path, mode: str, view: bool
) -> None:
    if mode == "pidns" and os.geteuid() != 0:
        pytest.skip("pidns needs root")
    worker = f', containment: "{mode}", sandbox_view: {"true" if view else "false"}'
    home = private_home(tmp_path, extra_worker=worker)
    repo = bazel_repo(tmp_path)
    argv = ["/bin/sh", "-c", f"sleep 4; : {uuid.uuid4().hex}"]
    with detached(home, repo), Client(f"127.0.0.1:{home.grpc_port}") as client:
        server = read_pid_file(home.state_dir)
        assert server is not None
        runner = threading.Thread(target=client.execute, args=(client.prepare(argv),))
        runner.start()
        try:
            action = _action_process(argv)
            chain = [action]  # from the action up to the process lre started
            while chain[-1].ppid() != server.pid:
                chain.append(psutil.Process(chain[-1].ppid()))
            lines = [_cmdline(p.pid) for p in chain]
        finally:
            runner.join(timeout=60)
    if mode == "portable":
        # GNU time, started by lre under lre's name, is the action's parent
        # (it reports the kernel's memory figure of the action's tree)
        assert len(lines) == 2 and lines[0] == argv, lines
        assert lines[1][0] == "lre-action" and lines[1][-len(argv) :] == argv, lines
        return
    # Every wrapper line ends with the action's argv, so it names the action.
    assert len(lines) >= 2 and all(line[-len(argv) :] == argv for line in lines), lines
    if mode == "pidns" and not view:
        # pid 1 (GNU time or timeout), started by lre, under lre's name
        assert lines[-1][0] == "lre-action", lines
