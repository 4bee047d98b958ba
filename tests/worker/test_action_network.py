"""The actions' shared network namespace and its slirp4netns: made once,
never lre's, gone with lre even when lre is SIGKILLed, and said when the
stack is missing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from lre.worker.containment._action_network import OutsideNetwork, make_network_namespace


def _net_of(pid: int | str) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def test_the_namespace_is_not_lres_and_has_its_loopback_up() -> None:
    if os.geteuid() != 0:
        pytest.skip("making a network namespace needs CAP_SYS_ADMIN")
    fd = make_network_namespace()
    try:
        assert os.readlink(f"/proc/self/fd/{fd}") != _net_of("self")
        # lre's own threads stayed in lre's namespace (a thread that ends
        # between the listing and its reading, such as the throwaway one that
        # made the namespace, is in none).
        for task in os.listdir("/proc/self/task"):
            try:
                net = _net_of(f"self/task/{task}")
            except FileNotFoundError:
                continue
            assert net == _net_of("self")
        shown = subprocess.run(
            ["nsenter", f"--net=/proc/{os.getpid()}/fd/{fd}", "ip", "-br", "link"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "lo " in shown and "UNKNOWN" in shown.split("lo ", 1)[1].splitlines()[0]
    finally:
        os.close(fd)


def test_without_slirp4netns_the_reason_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    outside = OutsideNetwork()
    assert outside.start(["1"]) is False
    assert outside.missing is not None and "slirp4netns is not installed" in outside.missing
    assert not outside.running


def _stacks() -> set[int]:
    return {p.pid for p in psutil.Process().children() if p.name() == "slirp4netns"}


def test_a_failing_stack_is_reaped_and_its_message_kept() -> None:
    before = _stacks()  # a pidns backend made earlier in this process keeps one
    outside = OutsideNetwork()
    # No process has this pid: slirp4netns fails at once, with and without its sandbox.
    assert outside.start([str(2**22 + 7)]) is False
    assert outside.missing is not None and "slirp4netns" in outside.missing
    assert _stacks() <= before


_LRE_LIKE = """
import sys, time
from lre.worker.containment._containment import choose_containment
backend = choose_containment(sys.argv[1])
print(backend.network_missing(), flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("mode", ["pidns", "userns"])
def test_the_stack_dies_with_a_sigkilled_lre(mode: str) -> None:
    if mode == "pidns" and os.geteuid() != 0:
        pytest.skip("pidns needs CAP_SYS_ADMIN")
    lre = subprocess.Popen(
        [sys.executable, "-c", _LRE_LIKE, mode], stdout=subprocess.PIPE, text=True
    )
    try:
        assert lre.stdout is not None
        assert lre.stdout.readline().strip() == "None"  # it runs
        stacks = [p for p in psutil.Process(lre.pid).children() if p.name() == "slirp4netns"]
        assert len(stacks) == 1, stacks
    finally:
        lre.send_signal(signal.SIGKILL)
        lre.communicate()
    deadline = time.monotonic() + 30
    while stacks[0].is_running() and stacks[0].status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "slirp4netns outlived lre"
        time.sleep(0.05)
