"""The process guardian kills the listed action groups once lre's end of the pipe closes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from lre.worker import _guardian
from lre.worker._guardian import ProcessGuardian


def sleeper_group() -> subprocess.Popen[bytes]:
    """A process group of a shell and a background sleep, like an action's."""
    return subprocess.Popen(["/bin/sh", "-c", "sleep 60 & sleep 60; wait"], start_new_session=True)


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs. Zombies do not count:
    with the portable containment tested in the same run, this test process
    is a child subreaper, and killed orphans wait here to be reaped."""
    for process in psutil.process_iter(["status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return False


def wait_group_gone(leader: subprocess.Popen[bytes], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leader.poll()  # reap the leader once it is killed
        if not group_alive(leader.pid):
            return True
        time.sleep(0.02)
    return False


def test_end_of_file_kills_listed_groups_and_spares_unlisted_ones() -> None:
    listed, unlisted = sleeper_group(), sleeper_group()
    guardian = subprocess.Popen(
        [sys.executable, "-I", "-S", _guardian.__file__], stdin=subprocess.PIPE
    )
    try:
        assert guardian.stdin is not None
        guardian.stdin.write(b"+%d\n+%d\n-%d\n" % (listed.pid, unlisted.pid, unlisted.pid))
        guardian.stdin.flush()
        time.sleep(0.2)
        assert group_alive(listed.pid)  # nothing happens while the pipe is open
        guardian.stdin.close()  # what lre's death looks like from the guardian
        assert guardian.wait(10) == 0
        assert wait_group_gone(listed), "the listed group survived"
        assert group_alive(unlisted.pid) and unlisted.poll() is None
    finally:
        for group in (listed, unlisted):
            if group_alive(group.pid):
                os.killpg(group.pid, 9)
            group.wait()


def test_process_guardian_starts_once_and_is_told_of_groups() -> None:
    guardian = ProcessGuardian()
    group = sleeper_group()
    try:
        guardian.add(group.pid)
        first = guardian.pid
        assert first is not None and os.path.exists(f"/proc/{first}")
        guardian.remove(group.pid)
        guardian.add(group.pid)
        assert guardian.pid == first  # one guardian per process
        # Closing lre's end (as lre's exit does) makes it kill the listed group.
        assert guardian._fd is not None
        os.close(guardian._fd)
        guardian._fd = None
        assert wait_group_gone(group), "the group survived the guardian's end of file"
        os.waitpid(first, 0)  # the guardian exited; reap it (lre would at exit)
    finally:
        if group_alive(group.pid):
            os.killpg(group.pid, 9)
        group.wait()
