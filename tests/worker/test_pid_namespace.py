"""pidns in a view: the gate stays pid 1 and the command runs as it would
under ``timeout`` (status, signals, stdin, stderr, descriptors, argv[0]).

In a view whose /proc the spawner mounts (Linux 6.15+), the first process is
POSIX sh waiting at a gate; it then runs the command as its child instead of
executing ``timeout`` (one exec fewer per action). Nothing the command sees
may differ from the ``timeout`` chain: a program named like a shell builtin
is still the program, a signal that kills the command is its status, the
shell's own report of that signal is no part of the action's stderr, and the
command holds exactly the descriptors lre handed it.

Where GNU time reports the command tree's peak (``_tree_peak``), the gate
executes it as pid 1 instead, and it runs the command as its child; the
same holds then, except that the command also holds pid 1's report file
(the ``time`` mode of each test).
"""

from __future__ import annotations

import fcntl
import os
import signal
from pathlib import Path

import pytest

from lre.worker import Containment
from lre.worker.containment._pid_namespace import _spare_descriptor
from lre.worker.process._process import ProcessOutcome, SpawnRequest, run_process

from .test_containment import backend
from .test_view_dev import _scratch_view

#: The report file pid 1 and the command hold, as /proc shows it.
REPORT = "/memfd:lre-tree-peak (deleted)"


@pytest.fixture(params=["gate", "time"])
def pidns(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Containment:
    """The pidns backend with its gate running the command (``gate``: GNU
    time unused) or executing GNU time as pid 1 (``time``)."""
    containment = backend("pidns")
    assert containment.can_view, "pidns gives actions no view here"
    if getattr(containment, "_gate_sh", None) is None:
        pytest.skip("this kernel mounts no /proc for a named PID namespace (Linux 6.15+)")
    if request.param == "gate":
        monkeypatch.setattr(containment, "peak_tool", None)
    elif containment.peak_tool is None:
        pytest.fail("GNU time is needed (.ci/run installs it)")
    return containment


async def _run(
    tmp_path: Path, containment: Containment, argv: list[str], **kwargs: object
) -> ProcessOutcome:
    view = _scratch_view(tmp_path)
    return await run_process(
        SpawnRequest(
            argv,
            cwd=Path(view.root),
            env={"PATH": "/usr/bin:/bin"},
            stdout_path=tmp_path / "out",
            stderr_path=tmp_path / "err",
            timeout=60,
            kill_grace=1,
            containment=containment,
            view=view,
            **kwargs,  # type: ignore[arg-type]
        )
    )


async def test_the_gate_is_pid_1_and_nothing_else_runs_before_the_command(
    tmp_path: Path, pidns: Containment
) -> None:
    script = 'cat /proc/1/comm; echo "$PPID"'
    outcome = await _run(tmp_path, pidns, ["/bin/sh", "-c", script])
    assert outcome.exit_code == 0, (tmp_path / "err").read_text()
    first, ppid = (tmp_path / "out").read_text().split()
    # pid 1 is the gate's sh and the command its child (the subshell
    # executed it), or GNU time the gate executed: no timeout in between.
    assert (first, ppid) == ("sh" if pidns.peak_tool is None else "time", "1")
    assert bool(outcome.tree_peak_bytes) == (pidns.peak_tool is not None), outcome


async def test_a_command_killed_by_a_signal_reports_it_and_nothing_more(
    tmp_path: Path, pidns: Containment
) -> None:
    outcome = await _run(tmp_path, pidns, ["/bin/sh", "-c", "echo before >&2; kill -SEGV $$"])
    assert outcome.exit_code == 128 + signal.SIGSEGV
    assert outcome.signal == signal.SIGSEGV
    # The shell in front reports the signal on its own stderr ("Segmentation
    # fault"): that line must not land in the action's.
    assert (tmp_path / "err").read_text() == "before\n"


async def test_exit_status_stdin_and_a_builtin_name(tmp_path: Path, pidns: Containment) -> None:
    # "echo" is a builtin of sh that does not take -e; the program from PATH does.
    outcome = await _run(tmp_path, pidns, ["echo", "-e", "a\\tb"])
    assert outcome.exit_code == 0, (tmp_path / "err").read_text()
    assert (tmp_path / "out").read_text() == "a\tb\n"
    (tmp_path / "again").mkdir()
    outcome = await _run(tmp_path / "again", pidns, ["/bin/sh", "-c", "cat; echo err >&2; exit 7"])
    assert outcome.exit_code == 7
    assert (tmp_path / "again" / "out").read_text() == ""  # stdin is /dev/null
    assert (tmp_path / "again" / "err").read_text() == "err\n"


def _free_low_descriptor() -> int | None:
    """A number from 3 to 9 this process has no descriptor at (the gate's
    candidates for its spare one), or None."""
    for number in range(3, 10):
        try:
            fcntl.fcntl(number, fcntl.F_GETFD)
        except OSError:
            return number
    return None


async def test_the_command_holds_exactly_the_descriptors_it_was_handed(
    tmp_path: Path, pidns: Containment
) -> None:
    # A handed descriptor at a number the gate could have taken for its spare
    # one stays as it is, and the gate keeps the real stderr at another
    # number, which the command does not get.
    read, write = os.pipe()
    low = _free_low_descriptor()
    handed = read
    if low is not None:
        os.dup2(read, low, inheritable=False)
        handed = low
    try:
        outcome = await _run(
            tmp_path,
            pidns,
            ["/bin/sh", "-c", "ls -l /proc/self/fd; echo err >&2"],
            pass_fds=(handed,),
        )
    finally:
        for fd in {read, write, handed}:
            os.close(fd)
    assert outcome.exit_code == 0, (tmp_path / "err").read_text()
    lines = (tmp_path / "out").read_text().splitlines()
    held = {
        int(line.split(" -> ")[0].split()[-1]): line.split(" -> ")[1]
        for line in lines
        if " -> " in line
    }
    # 0-2, the handed one, the one ls opens to list the directory, and under
    # GNU time its report file: the one it was handed and its own open of it
    # (the action may write there; _tree_peak parses it defensively)
    report = {fd for fd, target in held.items() if target == REPORT}
    listing = {fd for fd, target in held.items() if target.endswith("/fd")}
    assert len(report) == (0 if pidns.peak_tool is None else 2), held
    assert len(listing) == 1, held
    assert set(held) - report - listing == {0, 1, 2, handed}, held
    assert (tmp_path / "err").read_text() == "err\n"


def test_the_spare_descriptor_avoids_the_handed_ones() -> None:
    assert _spare_descriptor(()) == 3
    assert _spare_descriptor((3, 4, 17)) == 5
    assert _spare_descriptor(tuple(range(3, 10))) is None


async def test_pid_1_keeps_nothing_of_the_gate(tmp_path: Path, pidns: Containment) -> None:
    # After "go", the gate's pipe is closed in pid 1 too (its stdin is
    # /dev/null), and its stderr is /dev/null (the gate's sh) or the
    # action's (GNU time, which writes nothing there with -q): what it holds
    # besides is the action's own stdout and stderr, and time's report file.
    outcome = await _run(
        tmp_path, pidns, ["/bin/sh", "-c", "for fd in /proc/1/fd/*; do readlink $fd; done"]
    )
    assert outcome.exit_code == 0, (tmp_path / "err").read_text()
    targets = (tmp_path / "out").read_text().splitlines()
    assert not [t for t in targets if t.startswith("pipe:")], targets
    if pidns.peak_tool is None:
        assert targets.count("/dev/null") == 2, targets  # stdin and its own stderr
    else:
        assert targets.count("/dev/null") == 1, targets  # stdin
        assert targets.count(REPORT) == 2, targets
        assert len(targets) == 5, targets
