"""A view after its action: held past the end, torn down before its directory
is reused, and nothing of it reaching the next action.

pidns keeps each view's mount namespace open once the action ended
(``on_view_held``) so that lre does not wait in the action's exit for its
unmounts; ``ActionDirectories`` closes it before recycling the directory,
whose overlay work directory it then removes whole (an overlay that finds
one left empties and remakes it, slowly, in the spawner thread).
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import threading
from pathlib import Path

import pytest
import trio

from lre.cas import MemoryStore, read_bytes
from lre.digest import Digest
from lre.scheduler import Completed
from lre.worker import Containment
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker.containment._syscalls import call
from lre.worker.directories._action_dirs import ActionDirectory
from lre.worker.directories._workdir import WorkDirectory
from lre.worker.process._process import SpawnRequest, run_process
from lre.worker.view._view import ActionView
from tests._support.lre_as import python_for, scratch_for

from .conftest import make_lease, make_spec
from .test_containment import backend

_CLONE_FS = 0x200
_CLONE_NEWNS = 0x20000


@pytest.fixture(params=["pidns", "userns"])
def viewing(request: pytest.FixtureRequest) -> Containment:
    containment = backend(request.param)
    assert containment.can_view, f"{request.param} gives actions no view here"
    return containment


def _foreign_namespaces() -> list[str]:
    """Descriptors of this process that hold a mount namespace other than its own."""
    own = os.readlink("/proc/self/ns/mnt")
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("mnt:") and target != own:
            found.append(target)
    return found


def _mounts_inside(fd: int) -> str:
    """The mount table of the namespace ``fd`` holds, read from a thread
    that enters it (and never comes back: the thread ends)."""
    table: list[str] = []

    def enter() -> None:
        # The host's /proc, opened first: in the view, /proc is the action's.
        proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
        try:
            call("unshare", _CLONE_FS)
            call("setns", fd, _CLONE_NEWNS)
            mounts = os.open("thread-self/mountinfo", os.O_RDONLY, dir_fd=proc)
            with open(mounts) as file:
                table.append(file.read())
        finally:
            os.close(proc)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert table, "could not enter the held namespace"
    return table[0]


def _layers(tmp_path: Path) -> tuple[ActionDirectory, ActionView]:
    directory = ActionDirectory.at(tmp_path / "a1")
    for path in (directory.root, directory.tmp, directory.upper, directory.overlay_work):
        path.mkdir(parents=True)
    os.chmod(directory.path, 0o700)
    os.chmod(directory.tmp, 0o700)
    view = ActionView(
        root=str(directory.root),
        upper=str(directory.upper),
        work=str(directory.overlay_work),
        tmp=str(directory.tmp),
        xattrs="trusted",
    )
    return directory, view


async def test_pidns_holds_the_view_only_when_asked_and_it_is_the_actions(
    tmp_path: Path,
) -> None:
    """The descriptor handed over holds the action's view (its overlay over
    the input root still mounted); without ``on_view_held`` nothing is kept."""
    containment = backend("pidns")
    directory, view = _layers(tmp_path)
    common = {
        "cwd": directory.root,
        "env": {"PATH": "/usr/bin:/bin"},
        "stdout_path": tmp_path / "out",
        "stderr_path": tmp_path / "err",
        "timeout": 30.0,
        "kill_grace": 1.0,
        "containment": containment,
        "view": view,
    }
    before = _foreign_namespaces()
    outcome = await run_process(SpawnRequest(["/bin/sh", "-c", "echo w > written"], **common))  # type: ignore[arg-type]
    assert outcome.exit_code == 0
    assert _foreign_namespaces() == before, "a view was held that nobody asked for"

    held: list[int] = []
    (directory.upper / "written").unlink()
    _remove_work(directory)  # what recycling would do
    outcome = await run_process(
        SpawnRequest(
            ["/bin/sh", "-c", "echo w > written"],
            **common,  # type: ignore[arg-type]
            on_view_held=held.append,
        )
    )
    assert outcome.exit_code == 0
    assert len(held) == 1
    try:
        assert os.readlink(f"/proc/self/fd/{held[0]}") != os.readlink("/proc/self/ns/mnt")
        table = _mounts_inside(held[0])
        overlay = [line for line in table.splitlines() if " - overlay " in line]
        assert any(f" {directory.root} " in line for line in overlay), table
    finally:
        os.close(held[0])
    assert _foreign_namespaces() == before


def _remove_work(directory: ActionDirectory) -> None:
    subprocess.run(["rm", "-rf", str(directory.overlay_work / "work")], check=True)


async def test_held_views_are_closed_before_their_directories_are_recycled(
    tmp_path: Path, store: MemoryStore
) -> None:
    """Every view the runner held is closed by the time its directory is back
    in stock, and that directory's overlay work directory is empty."""
    containment = backend("pidns")
    spec = make_spec(tmp_path, max_inflight_tasks=1)
    before = _foreign_namespaces()
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store, containment=containment))
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.parts.directories.run)
            for done in range(3):
                argv = ["/bin/sh", "-c", "echo o > o"]
                lease = await make_lease(store, argv, output_paths=("o",))
                outcome = await runner.run(lease)
                assert isinstance(outcome, Completed) and outcome.error is None, outcome
                with trio.fail_after(10):
                    while runner.parts.directories.recycled <= done:  # noqa: ASYNC110 (thread work)
                        await trio.sleep(0.01)
                assert _foreign_namespaces() == before, done
            for directory in runner.parts.directories._stock:
                if directory.overlay_work.exists():
                    assert os.listdir(directory.overlay_work) == [], directory
            nursery.cancel_scope.cancel()


async def test_nothing_of_an_earlier_action_reaches_the_next_in_a_recycled_directory(
    tmp_path: Path, store: MemoryStore, viewing: Containment
) -> None:
    """Attack: each action leaves what it can in its view (a file in its input
    root, in /tmp, in /dev/shm, in its TMPDIR; where it may, a mount of its
    own) and looks for what the ones before it left; with one directory,
    recycled, no action may find anything."""
    spec = make_spec(tmp_path, max_inflight_tasks=1)
    script = (
        'found=""; for f in left /tmp/left /dev/shm/left "$TMPDIR/left" mnt/left; do '
        '[ -e "$f" ] && found="$found $f"; done; echo "found:$found"; '
        'echo x > left; echo x > /tmp/left; echo x > /dev/shm/left; echo x > "$TMPDIR/left"; '
        "mkdir -p mnt && { mount -t tmpfs none mnt 2>/dev/null; echo x > mnt/left; }; true"
    )
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store, containment=viewing))
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.parts.directories.run)
            for done in range(4):
                with trio.fail_after(10):
                    while runner.parts.directories.recycled < done:  # noqa: ASYNC110 (thread work)
                        await trio.sleep(0.01)
                lease = await make_lease(store, ["/bin/sh", "-c", script])
                outcome = await runner.run(lease)
                assert isinstance(outcome, Completed) and outcome.error is None, outcome
                stdout = Digest.from_proto(outcome.result.stdout_digest, field="")
                assert await read_bytes(store, stdout) == b"found:\n", done
            assert runner.parts.directories.recycled >= 3
            nursery.cancel_scope.cancel()


_RECYCLE_AS_NOBODY = """
import os, sys
from pathlib import Path
from lre.worker.directories._action_dirs import ActionDirectory, _empty_view, overlay_marks
directory = ActionDirectory.at(Path(sys.argv[1]))
kept = _empty_view(directory, (os.geteuid(),), overlay_marks("user"))
print(sorted(kept), sorted(os.listdir(directory.overlay_work)), sorted(os.listdir(directory.upper)))
"""


def test_an_unprivileged_lre_removes_the_overlays_work_directory_left_at_mode_0() -> None:
    """What a volatile overlay leaves (``work/work/incompat/volatile/dirty``,
    the directories at mode 0), removed by an lre that is not root, which
    must open each directory up first; the upper layer's copied-up
    directory (its ``user.overlay.*`` marks readable by their owner) kept,
    its output unlinked."""
    prefix, env = python_for("nobody")
    entry = pwd.getpwnam("nobody")
    with scratch_for("nobody") as scratch:
        base = scratch / "a1"
        directory = ActionDirectory.at(base)
        inner = directory.overlay_work / "work"
        (inner / "incompat" / "volatile").mkdir(parents=True)
        (inner / "incompat" / "volatile" / "dirty").write_bytes(b"")
        directory.upper.mkdir()
        os.chmod(directory.upper, 0o755)
        (directory.upper / "out").mkdir(mode=0o755)
        os.setxattr(directory.upper / "out", "user.overlay.origin", b"o")
        (directory.upper / "out" / "o").write_bytes(b"o")
        for parent, dirs, files in os.walk(base):
            for name in (*dirs, *files):
                os.chown(Path(parent) / name, entry.pw_uid, entry.pw_gid)
        os.chown(base, entry.pw_uid, entry.pw_gid)
        for path in (inner / "incompat" / "volatile", inner / "incompat", inner):
            os.chmod(path, 0)
        answer = subprocess.run(
            [*prefix, "-c", _RECYCLE_AS_NOBODY, str(base)],
            env=env,
            capture_output=True,
            text=True,
        )
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.strip() == "['out'] [] ['out']", answer
        assert stat.S_ISDIR(os.lstat(directory.overlay_work).st_mode)


async def test_directories_kept_in_the_upper_layer_show_only_where_the_next_root_has_them(
    tmp_path: Path, store: MemoryStore, viewing: Containment
) -> None:
    """Recycling keeps the directories an action's overlay copied up or made
    (its output parents and more), empty; the next action in that directory
    sees exactly its own input root: the same output parent again (empty,
    its output collected through it), and where it stages a file at a kept
    directory's path, that file, with no directory of the earlier action
    left anywhere."""
    spec = make_spec(tmp_path, max_inflight_tasks=1)
    writes = (
        "echo o > out/a/o; echo j > out/a/junk; mkdir -p out/a/more out/stray/deep; "
        "echo s > out/stray/deep/s"
    )
    listing = "find . | sort; "
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store, containment=viewing))
        directories = runner.parts.directories

        async def run(
            script: str, outputs: tuple[str, ...], inputs: dict[str, object] | None = None
        ) -> tuple[bytes, Completed]:
            done = directories.recycled
            lease = await make_lease(
                store, ["/bin/sh", "-c", script], output_files=outputs, inputs=inputs
            )
            outcome = await runner.run(lease)
            assert isinstance(outcome, Completed) and outcome.error is None, outcome
            with trio.fail_after(10):  # recycled, and back in stock
                while directories.recycled <= done or not directories.idle:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            stdout = Digest.from_proto(outcome.result.stdout_digest, field="")
            return await read_bytes(store, stdout), outcome

        async with trio.open_nursery() as nursery:
            await nursery.start(directories.run)
            await run(writes, ("out/a/o",))
            kept = directories._stock[-1].upper_dirs
            assert {"out", "out/a", "out/a/more", "out/stray", "out/stray/deep"} <= kept
            seen, outcome = await run(listing + "echo again > out/a/o", ("out/a/o",))
            assert seen == b".\n./out\n./out/a\n"
            (output,) = outcome.result.output_files
            assert await read_bytes(store, Digest.from_proto(output.digest, field="")) == (
                b"again\n"
            )
            await run(writes, ("out/a/o",))
            seen, _ = await run(listing + "cat out/a", (), {"out/a": b"a file\n"})
            assert seen == b".\n./out\n./out/a\na file\n"
            seen, _ = await run(listing, ())
            assert seen == b".\n"
            nursery.cancel_scope.cancel()
