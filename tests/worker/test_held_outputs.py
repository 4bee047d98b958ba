"""A view's large outputs: hashed under a write lease kept until they are
copied, then copied by the kernel with the digest trusted; refused when the
file changed on a path where that trust is not given."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lre.cas import FilesystemStore, read_bytes
from lre.digest import digest_of
from lre.errors import InvalidArgument, ResourceExhausted
from lre.worker.outputs import unshared_adopter
from lre.worker.outputs._leases import drop_lease, holds_lease
from lre.worker.outputs._limits import ActionLimits
from lre.worker.outputs._output_checks import OutputBudget
from lre.worker.outputs._outputs import FoundOutputs, OutputRequest, scan_outputs
from lre.worker.outputs._upload import upload_outputs

BIG = 3 << 20  # above KEEP_IN_MEMORY


@pytest.fixture
async def store(tmp_path: Path) -> FilesystemStore:
    cas = FilesystemStore(tmp_path / "cas", tmp_path / "cas-tmp", 64 << 20)
    await cas.open()
    return cas


def _view_outputs(tmp_path: Path, mounts: tuple[str, ...] = ()) -> tuple[Path, FoundOutputs]:
    """One big output ``out`` in an upper layer over an empty lower one."""
    upper, lower = tmp_path / "upper", tmp_path / "lower"
    upper.mkdir()
    lower.mkdir()
    out = upper / "out"
    out.write_bytes(b"head\n" + bytes(BIG))
    found = scan_outputs(
        upper,
        [OutputRequest("out", "out", "path")],
        allow_escaping_symlinks=False,
        lower=lower,
        xattrs="user",
        mounts=mounts,
    )
    return out, found


async def test_a_held_output_is_stored_equal_to_the_file_and_left_in_place(
    tmp_path: Path, store: FilesystemStore
) -> None:
    out, found = _view_outputs(tmp_path)
    ((_, item),) = found.files
    assert item.held is not None and holds_lease(item.held)
    await upload_outputs(store, [item], {}, adopt=unshared_adopter(store.adopt_file, store))
    assert await read_bytes(store, item.digest) == out.read_bytes()
    assert item.digest == digest_of(out.read_bytes())
    with pytest.raises(OSError):  # closed by the upload, lease gone with it
        os.fstat(item.held)


async def test_a_held_output_changed_after_its_lease_broke_is_refused(
    tmp_path: Path, store: FilesystemStore
) -> None:
    out, found = _view_outputs(tmp_path)
    ((_, item),) = found.files
    assert item.held is not None
    # Something opens the file after its hash (the open starts the lease's
    # break; the holder, or the break's timeout, lets it go) and writes.
    with pytest.raises(BlockingIOError):
        os.open(out, os.O_WRONLY | os.O_NONBLOCK)
    assert not holds_lease(item.held)
    drop_lease(item.held)
    with out.open("r+b") as changed:
        changed.write(b"HEAD\n")
    with pytest.raises(InvalidArgument, match="out"):
        await upload_outputs(store, [item], {}, adopt=unshared_adopter(store.adopt_file, store))
    assert (await store.has_many([item.digest])) == [None]


async def test_an_output_open_elsewhere_is_not_held_and_a_change_is_refused(
    tmp_path: Path, store: FilesystemStore
) -> None:
    upper, lower = tmp_path / "upper", tmp_path / "lower"
    upper.mkdir()
    lower.mkdir()
    out = upper / "out"
    out.write_bytes(b"head\n" + bytes(BIG))
    with out.open("r+b") as writer:  # another process's descriptor, kept
        found = scan_outputs(
            upper,
            [OutputRequest("out", "out", "path")],
            allow_escaping_symlinks=False,
            lower=lower,
            xattrs="user",
        )
        ((_, item),) = found.files
        assert item.held is None
        writer.write(b"HEAD\n")
    with pytest.raises(InvalidArgument, match="out"):
        await upload_outputs(store, [item], {}, adopt=unshared_adopter(store.adopt_file, store))


def test_an_output_under_a_mount_the_action_left_is_not_held(tmp_path: Path) -> None:
    _, found = _view_outputs(tmp_path, mounts=(str(tmp_path / "upper"),))
    ((_, item),) = found.files
    assert item.held is None


def test_a_failing_scan_closes_what_it_held(tmp_path: Path) -> None:
    upper, lower = tmp_path / "upper", tmp_path / "lower"
    upper.mkdir()
    lower.mkdir()
    for name in ("a", "b"):
        (upper / name).write_bytes(name.encode() * BIG)
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(ResourceExhausted):  # "b" takes the outputs over the limit
        scan_outputs(
            upper,
            [OutputRequest(name, name, "path") for name in ("a", "b")],
            allow_escaping_symlinks=False,
            budget=OutputBudget(ActionLimits(max_output_bytes=BIG + BIG // 2)),
            lower=lower,
            xattrs="user",
        )
    assert set(os.listdir("/proc/self/fd")) == before
