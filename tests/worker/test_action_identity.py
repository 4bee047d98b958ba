"""Actions of a root lre run as an unprivileged user (``action_user``), in a view.

The runner is given the identity ``unprivileged`` resolves to as root (``nobody``);
each test runs real actions under ``pidns`` and looks at what they could do.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest
import trio

from lre.cas import FilesystemStore, MemoryStore, read_bytes
from lre.config import JobserverSpec
from lre.digest import Digest
from lre.scheduler import Completed
from lre.worker import resolve_action_user
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker._view_policy import ViewPolicy
from lre.worker.containment._identity import ActionIdentity
from lre.worker.directories._workdir import WorkDirectory
from tests._support.ci import in_ci

from .conftest import make_lease, make_spec
from .test_containment import backend

_NOBODY_UID = pwd.getpwnam("nobody").pw_uid


@pytest.fixture
def nobody() -> ActionIdentity:
    if os.geteuid() != 0:
        if in_ci():
            pytest.fail("CI runs as root: actions must get a user of their own")
        pytest.skip("only root runs actions as another user")
    identity = resolve_action_user("unprivileged", viewed=True)
    assert identity is not None
    return identity


async def _stdout(store: MemoryStore, outcome: object) -> str:
    assert isinstance(outcome, Completed) and outcome.error is None, outcome
    digest = Digest.from_proto(outcome.result.stdout_digest, field="")
    return (await read_bytes(store, digest)).decode()


async def test_an_action_holds_no_privilege(
    tmp_path: Path, store: MemoryStore, nobody: ActionIdentity
) -> None:
    spec = make_spec(tmp_path)
    keys = "Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs"
    script = f"grep -E '^({keys}):' /proc/self/status"
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(
            RunnerContext(spec, workdir, store, containment=backend("pidns"), identity=nobody)
        )
        out = await _stdout(
            store, await runner.run(await make_lease(store, ["/bin/sh", "-c", script]))
        )
    fields = dict(line.split(":", 1) for line in out.splitlines())
    values = {key: value.split() for key, value in fields.items()}
    assert values["Uid"] == [str(nobody.uid)] * 4, out
    assert values["Gid"] == [str(nobody.gid)] * 4, out
    assert values["Groups"] == [], out
    for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(values[key][0], 16) == 0, out
    assert values["NoNewPrivs"] == ["1"], out


async def test_it_writes_its_outputs_tmp_and_fifo_but_not_its_inputs(
    tmp_path: Path, store: MemoryStore, nobody: ActionIdentity
) -> None:
    """Output parents lre made, staged input directories, TMPDIR (by its
    absolute path, below directories nobody may not enter on the host) and
    the jobserver's fifo are the action's; its input files are not."""
    spec = make_spec(tmp_path, jobserver=JobserverSpec(style="fifo"))
    os.chmod(tmp_path, 0o700)
    script = (
        'echo o > out/deep/o && echo s > src/made && echo t > "$TMPDIR/t" && '
        'cat "$TMPDIR/t" && fifo=${MAKEFLAGS##*fifo:} && : > "$fifo" && echo fifo; '
        "(echo w >> src/given) 2>/dev/null || echo input-refused"
    )
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(
            RunnerContext(spec, workdir, store, containment=backend("pidns"), identity=nobody)
        )
        lease = await make_lease(
            store,
            ["/bin/sh", "-c", script],
            inputs={"src/given": b"given\n"},
            output_paths=("out/deep/o", "src/made"),
            millicpus=4000,
        )
        outcome = await runner.run(lease)
        out = await _stdout(store, outcome)
    assert out == "t\nfifo\ninput-refused\n", out
    assert isinstance(outcome, Completed)
    assert sorted(f.path for f in outcome.result.output_files) == ["out/deep/o", "src/made"]


async def test_its_directories_are_recycled(
    tmp_path: Path, store: MemoryStore, nobody: ActionIdentity
) -> None:
    """Directories given to the action's user are recycled (not removed and
    made again), and the next action in them may still write there."""
    spec = make_spec(tmp_path, max_inflight_tasks=1)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(
            RunnerContext(spec, workdir, store, containment=backend("pidns"), identity=nobody)
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.parts.directories.run)
            for done in range(4):
                with trio.fail_after(10):
                    while runner.parts.directories.recycled < done:  # noqa: ASYNC110 (thread work)
                        await trio.sleep(0.01)
                lease = await make_lease(
                    store,
                    ["/bin/sh", "-c", 'echo o > out/o && echo t > "$TMPDIR/t" && stat -c %U .'],
                    output_paths=("out/o",),
                )
                out = await _stdout(store, await runner.run(lease))
                assert out == pwd.getpwuid(nobody.uid).pw_name + "\n", done
            assert runner.parts.directories.recycled >= 3
            nursery.cancel_scope.cancel()


async def test_its_outputs_are_stored_as_lres_files(tmp_path: Path, nobody: ActionIdentity) -> None:
    """An output the action's user made (on its view's tmpfs) is copied into
    the CAS as lre's file: a stored blob is never a file of the user actions
    run as, nor the inode the action wrote. Its inputs are the CAS's
    read-only inodes, shown as that user's (``_idmap.py``)."""
    store = FilesystemStore(tmp_path / "cas", tmp_path / "cas-tmp", 1 << 30)
    await store.open()
    spec = make_spec(tmp_path)
    script = "head -c 300000 /dev/zero > big; stat -c %i big > big-inode; stat -c '%u %a' data"
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(
            RunnerContext(
                spec,
                workdir,
                store,
                containment=backend("pidns"),
                identity=nobody,
            )
        )
        lease = await make_lease(
            store,  # type: ignore[arg-type]
            ["/bin/sh", "-c", script],
            inputs={"data": b"payload"},
            output_paths=("big", "big-inode"),
        )
        outcome = await runner.run(lease)
    out = await _stdout(store, outcome)  # type: ignore[arg-type]
    assert out == f"{nobody.uid} 444\n", out
    assert isinstance(outcome, Completed)
    digests = {f.path: Digest.from_proto(f.digest, field="") for f in outcome.result.output_files}
    stored = os.stat(await store.path_for_link(digests["big"], False))
    inode = (await read_bytes(store, digests["big-inode"])).decode().strip()
    assert str(stored.st_ino) != inode
    assert (stored.st_uid, stored.st_mode & 0o777) == (os.geteuid(), 0o444)


def test_a_writable_path_the_actions_user_may_not_write_is_named_at_start(
    open_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    closed = open_dir / "closed"
    shared = open_dir / "shared"
    for path, mode in ((closed, 0o755), (shared, 0o777)):
        path.mkdir()
        os.chmod(path, mode)
    owner = (_NOBODY_UID, _NOBODY_UID)
    ViewPolicy([], [str(closed), str(shared)], xattrs="trusted", owner=owner)
    named = [r.getMessage() for r in caplog.records if "sandbox_writable_paths" in r.getMessage()]
    assert len(named) == 1 and str(closed) in named[0], named
