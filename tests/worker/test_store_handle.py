"""The runner takes the store as it is and asks its ``capabilities()``: the
stage phase holds an action's input blobs pinned while it stages them (and
only then) where the store pins; its local files, reached through wrappers
too, are what inputs are hardlinked from; a store offering neither still
runs actions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lre.cas import (
    BlobStore,
    FilesystemStore,
    MemoryStore,
    VerifyStore,
    read_bytes,
)
from lre.digest import Digest
from lre.scheduler import Completed
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker.directories._workdir import WorkDirectory
from tests._support.stores import FakeStore

from .conftest import make_lease, make_spec


async def test_inputs_are_pinned_while_staged_then_released(tmp_path: Path) -> None:
    store = FakeStore(offer=("pin", "statistics"))
    spec = make_spec(tmp_path)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store))
        lease = await make_lease(
            store, ["/bin/cat", "a", "b"], inputs={"a": b"one\n", "b": b"two\n"}
        )
        outcome = await runner.run(lease)
        assert isinstance(outcome, Completed) and outcome.result.exit_code == 0, outcome
    # one pin, of the two input files' blobs, released once they were staged
    assert [{d.size_bytes for d in pinned} for pinned in store.pinned] == [{4}]
    assert len(store.pinned[0]) == 2
    assert store.inner.statistics().pinned_blobs == 0
    # an action without input files pins nothing
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store))
        outcome = await runner.run(await make_lease(store, ["/bin/true"]))
        assert isinstance(outcome, Completed) and outcome.result.exit_code == 0, outcome
    assert len(store.pinned) == 1


async def test_a_store_without_pins_still_stages(tmp_path: Path) -> None:
    store = FakeStore()  # no pin (as a gRPC store)
    spec = make_spec(tmp_path)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store))
        lease = await make_lease(store, ["/bin/cat", "a"], inputs={"a": b"one\n"})
        outcome = await runner.run(lease)
    assert isinstance(outcome, Completed) and outcome.result.exit_code == 0, outcome


async def _link_count_of_input(tmp_path: Path, store: BlobStore, reads: Any) -> str:
    """The link count an action run with ``store`` sees on its input file
    (``reads``: the store holding the blobs)."""
    spec = make_spec(tmp_path, sandbox_view=False)  # the staged file itself, no overlay
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store))
        lease = await make_lease(reads, ["/usr/bin/stat", "-c", "%h", "a"], inputs={"a": b"one\n"})
        outcome = await runner.run(lease)
    assert isinstance(outcome, Completed) and outcome.result.exit_code == 0, outcome
    return (await read_bytes(reads, Digest.from_proto(outcome.result.stdout_digest))).decode()


async def test_inputs_are_linked_from_local_files_found_through_a_wrapper(
    tmp_path: Path,
) -> None:
    files = FilesystemStore(tmp_path / "cas", tmp_path / "cas-tmp", 1 << 30)
    await files.open()
    linked = await _link_count_of_input(tmp_path / "fs", VerifyStore(files), files)
    assert int(linked) >= 2  # the staged input shares the stored file's inode
    memory = MemoryStore(1 << 30)
    assert await _link_count_of_input(tmp_path / "memory", memory, memory) == "1\n"
