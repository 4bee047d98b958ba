"""Actions that attack lre: each defect found by trying, as a regression test.

A build may run anything. These actions daemonize and keep writing, write to
their hardlinked inputs after they end, swap an output's parent for a symlink
to the user's files, hardlink a user's file as their output, and hand lre
symlink chains that resolve outside the input root. lre must never cache a
wrong result, serve a blob that does not hash to its digest, or touch a file
outside its own directories.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from lre.cas import FilesystemStore, read_bytes
from lre.digest import Digest, digest_of
from lre.errors import InvalidArgument, NotFound
from lre.scheduler import Completed
from lre.worker import Containment
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker.directories._workdir import WorkDirectory
from tests._support.actions import Link

from .conftest import make_lease, make_spec
from .test_containment import backend


@pytest.fixture(params=["pidns", "userns", "portable"])
def containment(request: pytest.FixtureRequest) -> Containment:
    return backend(request.param)


@asynccontextmanager
async def runner_with_janitor(
    tmp_path: Path, containment: Containment
) -> AsyncIterator[tuple[ActionRunner, FilesystemStore]]:
    """A runner on a real filesystem CAS (linked inputs, moved outputs) whose
    action directories are recycled, as in a running lre."""
    store = FilesystemStore(tmp_path / "cas", tmp_path / "cas-tmp", 1 << 30)
    await store.open()
    spec = make_spec(tmp_path, max_inflight_tasks=1)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store, containment=containment))
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.parts.directories.run)
            try:
                yield runner, store
            finally:
                nursery.cancel_scope.cancel()
    await store.close()


async def run(
    runner: ActionRunner, store: FilesystemStore, script: str, **lease: object
) -> Completed:
    outcome = await runner.run(await make_lease(store, ["/bin/sh", "-c", script], **lease))  # type: ignore[arg-type]
    assert isinstance(outcome, Completed), outcome
    return outcome


async def stored_matches(store: FilesystemStore, digest: Digest) -> bool:
    """The blob is either gone or exactly what its digest names."""
    try:
        data = await read_bytes(store, digest)
    except NotFound:
        return True
    return Digest(hashlib.sha256(data).hexdigest(), len(data)) == digest


async def test_a_daemon_writing_into_its_directory_poisons_no_later_action(
    tmp_path: Path, containment: Containment
) -> None:
    async with runner_with_janitor(tmp_path, containment) as (runner, store):
        daemon = (
            "setsid sh -c 'while :; do echo poison > out.txt; mkdir -p d; echo p > d/f; "
            "sleep 0.002; done' > /dev/null 2>&1 & sleep 0.05"
        )
        first = await run(runner, store, daemon)
        assert first.error is None
        # Directories are reused last in, first out: every later action gets
        # the one the daemon wrote into, if it were still alive.
        for _ in range(12):
            later = await run(runner, store, "sleep 0.02", output_paths=("out.txt", "d"))
            assert later.error is None
            assert list(later.result.output_files) == []
            assert list(later.result.output_directories) == []


async def test_a_daemon_holding_a_linked_input_cannot_change_the_cas(
    tmp_path: Path, containment: Containment
) -> None:
    payload = b"the true input\n"
    async with runner_with_janitor(tmp_path, containment) as (runner, store):
        script = (
            "chmod u+w data; setsid sh -c 'exec 3>>data; sleep 0.3; echo tampered >&3' "
            "> /dev/null 2>&1 & sleep 0.05"
        )
        await run(runner, store, script, inputs={"data": payload})
        await trio.sleep(0.6)  # past the moment the daemon would write
        assert await stored_matches(store, digest_of(payload))


async def test_an_output_under_a_parent_swapped_for_a_symlink_is_refused(
    tmp_path: Path, containment: Containment
) -> None:
    outside = tmp_path / "users-files"
    (outside / "tree").mkdir(parents=True)
    (outside / "victim.txt").write_bytes(b"mine")
    (outside / "tree" / "keep").write_bytes(b"also mine")
    async with runner_with_janitor(tmp_path, containment) as (runner, store):
        script = f"rm -rf d; ln -s {outside} d"
        for output in ("d/victim.txt", "d/tree"):
            outcome = await run(runner, store, script, output_paths=(output,))
            assert isinstance(outcome.error, InvalidArgument)
            assert "symlink" in outcome.message and output in outcome.message
    # Nothing outside was moved, emptied or chmodded.
    assert (outside / "victim.txt").read_bytes() == b"mine"
    assert (outside / "tree" / "keep").read_bytes() == b"also mine"
    assert stat.S_IMODE((outside / "victim.txt").stat().st_mode) == 0o644


async def test_a_hardlinked_outside_file_is_copied_not_adopted(
    tmp_path: Path, containment: Containment
) -> None:
    outside = tmp_path / "users-file.txt"
    outside.write_bytes(b"version 1\n")
    os.chmod(outside, 0o644)
    async with runner_with_janitor(tmp_path, containment) as (runner, store):
        outcome = await run(runner, store, f"ln {outside} out.txt", output_paths=("out.txt",))
        assert outcome.error is None
        if runner.parts.view_policy is not None:
            # In a view the user's file is not there to be linked at all.
            assert outcome.result.exit_code != 0 and not outcome.result.output_files
            return
        (out,) = outcome.result.output_files
        digest = Digest.from_proto(out.digest, field="digest")
        assert digest == digest_of(b"version 1\n")
        cas_file = await store.path_for_link(digest, False)
        # The user's file keeps its mode and its own inode.
        assert stat.S_IMODE(outside.stat().st_mode) == 0o644
        assert os.stat(cas_file).st_ino != outside.stat().st_ino
        # An in-place edit of the user's file does not reach the CAS.
        outside.write_bytes(b"version 2\n")
        assert await read_bytes(store, digest) == b"version 1\n"


async def test_a_symlink_chain_resolving_outside_the_root_is_refused(
    tmp_path: Path, containment: Containment
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"host secret")
    marker = tmp_path / "ran"
    async with runner_with_janitor(tmp_path, containment) as (runner, store):
        # Each target, read as text, stays inside: a/r -> .. is the root
        # itself, and "a/r/" * 30 then "../" * 30 is the root again. But the
        # kernel follows a/r back to the root each time, so the 30 ".." then
        # climb to "/", and the rest names the host's file. t is a link to s.
        relative_secret = str(secret).lstrip("/")
        inputs = {
            "a": {"r": Link("..")},
            "s": Link("a/r/" * 30 + "../" * 30 + relative_secret),
            "t": Link("s"),
        }
        outcome = await run(runner, store, f"touch {marker}; cat s", inputs=inputs)
        assert isinstance(outcome.error, InvalidArgument)
        assert "resolves outside the input root" in outcome.message
        assert not marker.exists()


@pytest.mark.parametrize("swap", ["ln -s", "ln"])
async def test_a_log_file_swapped_for_a_host_file_is_refused(
    tmp_path: Path, containment: Containment, swap: str
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"host secret\n")
    async with runner_with_janitor(tmp_path, containment) as (runner, store):
        # The action's stdout file lies one level above its input root.
        outcome = await run(runner, store, f"rm -f ../stdout && {swap} {secret} ../stdout")
        if runner.parts.view_policy is None:
            assert isinstance(outcome.error, InvalidArgument)
            assert "stdout" in outcome.message
        else:  # in a view neither lre's log file nor the host's file is there
            assert outcome.error is None
        assert (await store.has_many([digest_of(b"host secret\n")])) == [None]
    assert secret.read_bytes() == b"host secret\n"
