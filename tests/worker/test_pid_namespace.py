"""pidns in a view: the gate stays pid 1 and the command runs as it would
under ``timeout`` (status, signals, stdin, stderr, descriptors, argv[0]).

In a view whose /proc the spawner mounts (Linux 6.15+), the first process is
POSIX sh waiting at a gate; it then runs the command as its child instead of
executing ``timeout`` (one exec fewer per action). Nothing the command sees
may differ from the ``timeout`` chain: a program named like a shell builtin
is still the program, a signal that kills the command is its status, the
shell's own report of that signal is no part of the action's stderr, and the
command holds exactly the descriptors lre handed it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from lre.worker import Containment
from lre.worker._pid_namespace import _spare_descriptor
from lre.worker._process import ProcessOutcome, run_process
from lre.worker._view import ActionView

from .test_containment import backend


@pytest.fixture
def pidns() -> Containment:
    containment = backend("pidns")
    assert containment.can_view, "pidns gives actions no view here"
    if getattr(containment, "_gate_sh", None) is None:
        pytest.skip("this kernel mounts no /proc for a named PID namespace (Linux 6.15+)")
    return containment


def _view(tmp_path: Path) -> ActionView:
    for name in ("root", "tmp", "upper", "work"):
        (tmp_path / name).mkdir()
    return ActionView(
        root=str(tmp_path / "root"),
        upper=str(tmp_path / "upper"),
        work=str(tmp_path / "work"),
        tmp=str(tmp_path / "tmp"),
        xattrs="trusted",
    )


async def _run(
    tmp_path: Path, containment: Containment, argv: list[str], **kwargs: object
) -> ProcessOutcome:
    view = _view(tmp_path)
    return await run_process(
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


async def test_the_gate_is_pid_1_and_nothing_else_runs_before_the_command(
    tmp_path: Path, pidns: Containment
) -> None:
    script = 'cat /proc/1/comm; echo "$PPID"'
    outcome = await _run(tmp_path, pidns, ["/bin/sh", "-c", script])
    assert outcome.exit_code == 0, (tmp_path / "err").read_text()
    first, ppid = (tmp_path / "out").read_text().split()
    # pid 1 is the gate's sh and the command its child (the subshell
    # executed it): no timeout in between.
    assert (first, ppid) == ("sh", "1")


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


async def test_the_command_holds_exactly_the_descriptors_it_was_handed(
    tmp_path: Path, pidns: Containment
) -> None:
    # A descriptor at 3 (the gate's first choice of a spare one) is handed on
    # as it is, and the gate then keeps the real stderr at another number,
    # which the command does not get.
    read, write = os.pipe()
    try:
        if read != 3:
            os.dup2(read, 3, inheritable=False)
            os.close(read)
            read = 3
        outcome = await _run(
            tmp_path,
            pidns,
            ["/bin/sh", "-c", "ls /proc/self/fd; echo err >&2"],
            pass_fds=(read,),
        )
    finally:
        os.close(read)
        os.close(write)
    assert outcome.exit_code == 0, (tmp_path / "err").read_text()
    # 0-2, the handed 3, and the one ls opens to list the directory
    listed = sorted(int(name) for name in (tmp_path / "out").read_text().split())
    assert listed[:4] == [0, 1, 2, 3]
    assert len(listed) == 5, listed
    assert (tmp_path / "err").read_text() == "err\n"


def test_the_spare_descriptor_avoids_the_handed_ones() -> None:
    assert _spare_descriptor(()) == 3
    assert _spare_descriptor((3, 4, 17)) == 5
    assert _spare_descriptor(tuple(range(3, 10))) is None
