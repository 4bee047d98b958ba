"""A view after its action: held past the end, torn down before its directory
is reused, and nothing of it reaching the next action.

pidns keeps each view's mount namespace open once the action ended
(``on_view_held``) so that lre does not wait in the action's exit for its
unmounts; ``ActionDirectories`` closes it before recycling the directory,
whose overlay layers (a tmpfs of the action's own) it then drops whole.
"""

from __future__ import annotations

import os
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
from lre.worker.view._view import ActionView, make_layers

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


def _directory(tmp_path: Path) -> ActionDirectory:
    directory = ActionDirectory.at(tmp_path / "a1")
    for path in (directory.root, directory.tmp):
        path.mkdir(parents=True)
    os.chmod(directory.path, 0o700)
    os.chmod(directory.tmp, 0o700)
    return directory


def _view(directory: ActionDirectory, layers: int) -> ActionView:
    """The view of ``directory`` over the tmpfs ``layers`` (a view takes
    one tmpfs: its /tmp and /dev/shm are attached from it)."""
    return ActionView(
        root=str(directory.root),
        upper=f"/proc/self/fd/{layers}/upper",
        work=f"/proc/self/fd/{layers}/work",
        tmp=str(directory.tmp),
        xattrs="trusted",
        layers=layers,
    )


async def test_pidns_holds_the_view_only_when_asked_and_it_is_the_actions(
    tmp_path: Path,
) -> None:
    """The descriptor handed over holds the action's view (its overlay over
    the input root still mounted); without ``on_view_held`` nothing is kept."""
    containment = backend("pidns")
    directory = _directory(tmp_path)
    layers = [make_layers(0), make_layers(0)]
    common = {
        "cwd": directory.root,
        "env": {"PATH": "/usr/bin:/bin"},
        "stdout_path": tmp_path / "out",
        "stderr_path": tmp_path / "err",
        "timeout": 30.0,
        "kill_grace": 1.0,
        "containment": containment,
    }
    before = _foreign_namespaces()
    outcome = await run_process(
        SpawnRequest(
            ["/bin/sh", "-c", "echo w > written"], **common, view=_view(directory, layers[0])
        )  # type: ignore[arg-type]
    )
    assert outcome.exit_code == 0
    assert _foreign_namespaces() == before, "a view was held that nobody asked for"

    held: list[int] = []
    outcome = await run_process(
        SpawnRequest(
            ["/bin/sh", "-c", "echo w > written"],
            **common,  # type: ignore[arg-type]
            view=_view(directory, layers[1]),
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
        for fd in layers:
            os.close(fd)
    assert _foreign_namespaces() == before


async def test_held_views_are_closed_before_their_directories_are_recycled(
    tmp_path: Path, store: MemoryStore
) -> None:
    """Every view the runner held is closed by the time its directory is back
    in stock, with a tmpfs of its own whose layers are empty."""
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
                assert directory.layers is not None, directory
                assert os.listdir(directory.layers.upper) == [], directory
                assert os.listdir(directory.layers.upper.parent / "work") == [], directory
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


async def test_the_next_action_in_a_recycled_directory_sees_exactly_its_own_root(
    tmp_path: Path, store: MemoryStore, viewing: Containment
) -> None:
    """An action's overlay copies up or makes directories (its output
    parents and more) on its own tmpfs; the next action in that directory
    sees exactly its own input root: the same output parent again (empty,
    its output collected through it), and where it stages a file at such a
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
