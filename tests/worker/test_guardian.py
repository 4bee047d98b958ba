"""The process guardian kills the listed action groups once lre's end of the pipe closes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import psutil
import pytest

from lre.worker.containment import _guardian
from lre.worker.containment._guardian import ProcessGuardian
from tests._support.lre_as import (
    each_setup,
    require_setup,
    run_driver,
    scratch_for,
    start_driver,
    start_victim,
)
from tests._support.processes import processes_with, wait_until


def sleeper_group(stdout: IO[bytes] | None = None) -> subprocess.Popen[bytes]:
    """A process group of a shell and a background sleep, like an action's."""
    return subprocess.Popen(
        ["/bin/sh", "-c", "sleep 60 & sleep 60; wait"], stdout=stdout, start_new_session=True
    )


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


def test_an_announced_spawn_is_found_by_its_stdout_when_lre_dies(tmp_path: Path) -> None:
    # What lre's end of the channel shows when lre dies after a fork and
    # before listing the child: the spawn announced, no ``+`` line.
    guardian = ProcessGuardian()
    guardian.start()
    with open(tmp_path / "stdout", "wb") as stdout:
        older = sleeper_group(stdout)  # holds the file, born before the announcement
        time.sleep(0.05)  # a few clock ticks of /proc's start times
        guardian.spawning(stdout.fileno())
        child = sleeper_group(stdout)
        stranger = sleeper_group()  # born meanwhile, holds nothing of the spawn's
    try:
        assert guardian._fd is not None
        os.close(guardian._fd)
        guardian._fd = None
        assert wait_group_gone(child), "the unlisted child survived lre's death"
        assert guardian.pid is not None
        os.waitpid(guardian.pid, 0)
        assert group_alive(older.pid) and group_alive(stranger.pid)
    finally:
        for group in (older, child, stranger):
            if group_alive(group.pid):
                os.killpg(group.pid, 9)
            group.wait()


def test_children_forked_while_the_guardian_kills_die_too() -> None:
    # An action that keeps starting children in sessions of their own: each
    # one forked after the guardian read the process table would escape a
    # kill by that table alone.
    marker = _sleep_marker()
    action = subprocess.Popen(
        ["/bin/sh", "-c", f"while :; do setsid sleep {marker} & done"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    guardian = ProcessGuardian()
    try:
        guardian.add(action.pid)
        wait_until(lambda: len(processes_with(marker)) > 50)
        assert guardian._fd is not None and guardian.pid is not None
        os.close(guardian._fd)
        guardian._fd = None
        os.waitpid(guardian.pid, 0)
        action.wait(10)
        # a fork under way when its parent died completes within moments
        assert wait_until(lambda: not processes_with(marker), 2), (
            f"{len(processes_with(marker))} children outlived the kill"
        )
    finally:
        for process in processes_with(marker):
            process.kill()
        if action.poll() is None:
            os.killpg(action.pid, 9)
            action.wait()


def test_an_ended_spawn_is_forgotten(tmp_path: Path) -> None:
    guardian = subprocess.Popen(
        [sys.executable, "-I", "-S", _guardian.__file__], stdin=subprocess.PIPE
    )
    with open(tmp_path / "stdout", "wb") as stdout:
        group = sleeper_group(stdout)
    try:
        info = os.stat(tmp_path / "stdout")
        assert guardian.stdin is not None
        # a spawn announced and ended: nothing holds it any more
        guardian.stdin.write(b">%d:%d:0\n<%d:%d\n" % ((info.st_dev, info.st_ino) * 2))
        guardian.stdin.close()
        assert guardian.wait(10) == 0
        assert group_alive(group.pid)
    finally:
        os.killpg(group.pid, 9)
        group.wait()


# --------------------------------------------------------------------------- attacks
# Each runs the attack from inside a real action of a driver lre
# (tests/_support/lre_driver.py), as lre's own user and as nobody.


#: Writes a command to every descriptor of the guardian it can open: a
#: "kill this process at shutdown" line naming a process outside any action.
COMMAND_THE_GUARDIAN = (
    "for fd in /proc/{guardian}/fd/*; do "
    'printf \'*%d\\n\' {victim} 2>/dev/null > "$fd" && echo "wrote $fd"; done; true'
)


@pytest.mark.attack("guardian channel: an action commands the guardian")
@each_setup()
def test_an_action_cannot_make_a_clean_shutdown_kill_a_process(
    containment: str, identity: str
) -> None:
    require_setup(containment, identity)
    victim = start_victim(identity)
    try:
        with scratch_for(identity) as scratch:
            request = {"mode": containment, "script": COMMAND_THE_GUARDIAN, "then": "down"}
            answer = run_driver(identity, {**request, "victim": victim.pid}, scratch)
        assert answer["exit_code"] == 0, answer
        time.sleep(0.2)
        assert victim.poll() is None, f"the guardian took the action's command: {answer}"
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.attack("guardian channel: an action outlives a SIGKILL of lre")
@each_setup()
def test_holding_the_guardian_channel_does_not_outlive_lre(containment: str, identity: str) -> None:
    require_setup(containment, identity)
    marker = _sleep_marker()
    script = (
        "{{ echo held; exec sleep " + marker + "; }} 3>/proc/{guardian}/fd/0 "
        "|| {{ echo refused; exec sleep " + marker + "; }}"
    )
    _assert_gone_after_lre_killed(containment, identity, script, marker)


@each_setup()
def test_an_action_lre_had_not_listed_yet_dies_with_lre(containment: str, identity: str) -> None:
    """lre dies after forking an action's first process and before listing
    it with the guardian (a spawner thread descheduled under load): the
    guardian finds the action by its stdout file and kills it."""
    require_setup(containment, identity)
    marker = _sleep_marker()
    script = "echo started; exec sleep " + marker
    _assert_gone_after_lre_killed(containment, identity, script, marker, stall_listing=True)


def _sleep_marker() -> str:
    """A sleep duration of over an hour that no other process's command line has."""
    return f"{5000 + os.getpid() % 1000}.{time.monotonic_ns() % 10**9:09d}"


def _assert_gone_after_lre_killed(
    containment: str, identity: str, script: str, marker: str, *, stall_listing: bool = False
) -> None:
    """Run ``script`` as an action of a driver lre, SIGKILL the driver once
    the action wrote a line, and fail if a process with ``marker`` in its
    command line is still alive a minute later."""
    request: dict[str, object] = {"mode": containment, "script": script, "then": "hang"}
    if stall_listing:
        request["stall_listing"] = True
    with scratch_for(identity) as scratch:
        driver = start_driver(identity, request, scratch)
        try:
            assert driver.stdout is not None
            line = driver.stdout.readline()
            assert line, f"the driver ended early: {driver.communicate()[1]}"
            driver.kill()  # lre SIGKILLed
            driver.communicate()
            # An escaped action sleeps for over an hour: a minute tells the
            # two apart on a machine at any load (5 s did not at load 20).
            gone = wait_until(lambda: not processes_with(marker), 60.0)
            assert gone, f"the action outlived lre ({line.strip()}): {_who(marker, line)}"
        finally:
            for process in processes_with(marker):
                process.kill()
            driver.kill()
            driver.communicate()


def _who(marker: str, line: str) -> str:
    """What a failure needs to be understood: each survivor's parent, group and
    state, and whether the guardian (its pid from the driver's line) lives."""
    survivors = []
    for process in processes_with(marker):
        try:
            survivors.append(
                f"{process.pid} ppid {process.ppid()} pgid {os.getpgid(process.pid)} "
                f"{process.status()} {process.cmdline()}"
            )
        except (psutil.Error, OSError) as error:
            survivors.append(f"{process.pid}: {error}")
    guardian = json.loads(line).get("guardian")
    state: str
    try:
        state = psutil.Process(guardian).status() if guardian else "unknown"
    except psutil.Error:
        state = "gone"
    return f"survivors {survivors}; guardian {guardian} {state}"


def test_the_guardian_refuses_numbers_that_name_no_single_process() -> None:
    # kill(-1) is every process of the user, kill(0) the guardian's own group,
    # kill(1) init: never a listed action's process or group.
    for line in (b"*-1", b"*0", b"*1", b"+0", b"+1", b"+-5", b"/-1", b"*12x", b"?12"):
        assert _guardian.parse_command(line) is None, line
    assert _guardian.parse_command(b"*4242") == (b"*", 4242)
    assert _guardian.parse_command(b"+77") == (b"+", 77)


def test_the_guardian_reads_only_whole_spawn_lines() -> None:
    for line in (b">1:2", b">1:2:3:4", b"<1", b"<1:2:3", b">1:-2:3", b">1:2:x", b"+1:2", b"<:"):
        assert _guardian.parse_spawn(line) is None, line
    assert _guardian.parse_spawn(b">64769:1234:99") == (b">", (64769, 1234, 99))
    assert _guardian.parse_spawn(b"<64769:1234") == (b"<", (64769, 1234))
