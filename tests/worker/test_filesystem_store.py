"""The worker with the real FilesystemStore: hardlinked inputs, adopted outputs,
and the action cache written per policy."""

from __future__ import annotations

import os
from pathlib import Path

from lre.cas import (
    ActionResultCache,
    FilesystemStore,
    MemoryActionCache,
    read_bytes,
)
from lre.config._worker_models import UploadActionResultSpec
from lre.digest import Digest, digest_of
from lre.scheduler import Completed
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker.directories._workdir import WorkDirectory
from tests._support.actions import File

from .conftest import make_lease, make_spec


async def open_store(tmp_path: Path) -> FilesystemStore:
    store = FilesystemStore(tmp_path / "cas", tmp_path / "cas-tmp", 1 << 30)
    await store.open()
    return store


async def test_inputs_hardlinked_outputs_copied_from_the_view_results_cached(
    tmp_path: Path,
) -> None:
    store = await open_store(tmp_path)
    cache = ActionResultCache(MemoryActionCache(), store)
    spec = make_spec(tmp_path)
    script = (
        "stat -c '%i %h %a' data tool > inodes; "
        "head -c 3000000 /dev/zero > big; echo small > small; stat -c %i big > big-inode"
    )
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(
            RunnerContext(
                spec,
                workdir,
                store,
                action_cache=cache,
            )
        )
        lease = await make_lease(
            store,  # type: ignore[arg-type]
            ["/bin/sh", "-c", script],
            inputs={"data": b"payload", "tool": File(b"payload", executable=True)},
            output_paths=("inodes", "big", "small", "big-inode"),
        )
        outcome = await runner.run(lease)
        assert isinstance(outcome, Completed) and outcome.error is None
        text = (await read_bytes(store, _d(outcome, "inodes"))).decode()
        (data_inode, _, data_mode), (tool_inode, _, tool_mode) = (
            line.split() for line in text.splitlines()
        )
        # Same content, different executable bit: two distinct CAS inodes,
        # each the very inode of the CAS file (hardlinked, not copied).
        assert data_inode != tool_inode
        cas_data = await store.path_for_link(digest_of(b"payload"), False)
        assert str(os.stat(cas_data).st_ino) == data_inode
        assert (data_mode, tool_mode) == ("444", "555")
        # The big output was written on the view's own tmpfs, dropped after
        # the action: copied into the CAS (a new inode on the store's disk).
        assert await read_bytes(store, _d(outcome, "big")) == b"\0" * 3_000_000
        cas_big = await store.path_for_link(_d(outcome, "big"), False)
        big_inode = (await read_bytes(store, _d(outcome, "big-inode"))).decode().strip()
        assert os.stat(cas_big).st_dev == os.stat(tmp_path).st_dev
        assert str(os.stat(cas_big).st_ino) != big_inode
        cached = await cache.get_result(lease.action_key.action_digest)
        assert cached == outcome.result


async def test_cache_policy(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    for strategy, exit_code, do_not_cache, expect in (
        ("success_only", 1, False, False),
        ("everything", 1, False, True),
        ("success_only", 0, True, False),
        ("never", 0, False, False),
    ):
        cache = ActionResultCache(MemoryActionCache(), store)
        spec = make_spec(
            tmp_path,
            upload_action_result=UploadActionResultSpec(upload_ac_results_strategy=strategy),
        )
        with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
            runner = ActionRunner(RunnerContext(spec, workdir, store, action_cache=cache))
            lease = await make_lease(
                store,  # type: ignore[arg-type]
                ["/bin/sh", "-c", f"exit {exit_code}"],
                do_not_cache=do_not_cache,
            )
            outcome = await runner.run(lease)
        assert isinstance(outcome, Completed)
        stored = await cache.get_result(lease.action_key.action_digest)
        assert (stored is not None) == expect, (strategy, exit_code, do_not_cache)


def _d(outcome: Completed, name: str) -> Digest:
    for output in outcome.result.output_files:
        if output.path == name:
            return Digest.from_proto(output.digest)
    raise AssertionError(name)
