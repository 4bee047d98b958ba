"""Storing an action's outputs: a store error ends that action with a status
naming the output, never with an exception group."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lre.cas import FilesystemStore, read_bytes
from lre.digest import digest_of
from lre.errors import InvalidArgument, NotFound, ResourceExhausted
from lre.worker.outputs._outputs import OutputRequest, scan_outputs
from lre.worker.outputs._upload import upload_outputs

BIG = 3 << 20  # above KEEP_IN_MEMORY: streamed from disk at upload


def _outputs(root: Path, names: list[str]) -> list[OutputRequest]:
    for index, name in enumerate(names):
        (root / name).write_bytes(bytes([65 + index]) * BIG)
    return [OutputRequest(name, name, "path") for name in names]


@pytest.fixture
async def store(tmp_path: Path) -> FilesystemStore:
    cas = FilesystemStore(tmp_path / "cas", tmp_path / "cas-tmp", 64 << 20)
    await cas.open()
    return cas


@pytest.mark.parametrize("adopt", [False, True], ids=["copied", "moved"])
async def test_a_file_truncated_between_hash_and_upload_fails_naming_it(
    tmp_path: Path, store: FilesystemStore, adopt: bool
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    found = scan_outputs(root, _outputs(root, ["a", "b", "c"]), allow_escaping_symlinks=False)
    os.truncate(root / "b", 10)  # another process, after lre hashed it
    files = [item for _, item in found.files]
    with pytest.raises(InvalidArgument) as caught:
        await upload_outputs(store, files, found.blobs, adopt=store.adopt_file if adopt else None)
    assert "'b'" in caught.value.message
    assert str(BIG) in caught.value.message
    # Nothing was stored under b's digest.
    with pytest.raises(NotFound):
        await read_bytes(store, files[1].digest)
    await store.close()


async def test_two_failing_uploads_raise_one_error(tmp_path: Path) -> None:
    small = FilesystemStore(tmp_path / "cas", tmp_path / "cas-tmp", 4 << 20)
    await small.open()
    root = tmp_path / "root"
    root.mkdir()
    (root / "x").write_bytes(b"x" * (1 << 20 | 5))  # fits
    (root / "z1").write_bytes(b"1" * (5 << 20))  # each larger than the CAS
    (root / "z2").write_bytes(b"2" * (5 << 20))
    requests = [OutputRequest(name, name, "path") for name in ("x", "z1", "z2")]
    found = scan_outputs(root, requests, allow_escaping_symlinks=False)
    files = [item for _, item in found.files]
    with pytest.raises(ResourceExhausted) as caught:
        await upload_outputs(small, files, {})
    assert "'z1'" in caught.value.message or "'z2'" in caught.value.message
    assert str(5 << 20) in caught.value.message
    assert digest_of(b"1" * (5 << 20)) == files[1].digest
    await small.close()
