"""stage_inputs on large trees (placed by several threads), empty ones, and roots
that already hold the directories of a previous action."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from lre.cas import DirectoryCache, DirectoryReader, FilesystemStore, MemoryStore
from lre.digest import Digest
from lre.errors import Internal
from lre.worker.inputs._input_tree import InputTree, fetch_input_tree
from lre.worker.inputs._staging import PARALLEL_FILES, stage_inputs
from tests._support.actions import File, Link, put_tree
from tests._support.stores import FakeStore


def big_spec(files: int) -> dict[str, object]:
    spec: dict[str, object] = {}
    for d in range(10):
        spec[f"d{d}"] = {
            f"f{f:04d}": (
                File(f"{d}/{f}".encode(), executable=True) if f % 7 == 0 else f"{d}/{f}".encode()
            )
            for f in range(files // 10)
        }
    spec["empty"] = b""
    return spec


def check(root: Path, files: int) -> None:
    for d in range(10):
        for f in range(files // 10):
            path = root / f"d{d}" / f"f{f:04d}"
            assert path.read_bytes() == f"{d}/{f}".encode()
            assert os.stat(path).st_mode & 0o777 == (0o555 if f % 7 == 0 else 0o444)
    assert (root / "empty").read_bytes() == b""


async def test_large_tree_copied_from_memory(tmp_path: Path) -> None:
    files = (PARALLEL_FILES // 10 + 2) * 10  # enough to take the threaded path
    store = MemoryStore(1 << 30)
    tree = await fetch_input_tree(DirectoryReader(store), await put_tree(store, big_spec(files)))
    root = tmp_path / "root"
    root.mkdir()
    stats = await stage_inputs(store, tree, root, output_parents=["out/deep/x", "top"])
    assert stats.files == files + 1 and stats.copied == files + 1 and stats.linked == 0
    check(root, files)
    assert (root / "out" / "deep").is_dir()


async def test_large_tree_hardlinked_from_filesystem_store(tmp_path: Path) -> None:
    files = (PARALLEL_FILES // 10 + 2) * 10  # enough to take the threaded path
    store = FilesystemStore(tmp_path / "cas", tmp_path / "cas-tmp", 1 << 30)
    await store.open()
    tree = await fetch_input_tree(DirectoryReader(store), await put_tree(store, big_spec(files)))
    root = tmp_path / "root"
    root.mkdir()
    stats = await stage_inputs(store, tree, root, local_files=store)
    assert stats.linked == files  # every non-empty file is a link into the CAS
    check(root, files)
    assert os.stat(root / "d1" / "f0001").st_nlink >= 2


async def test_empty_tree_without_parents_touches_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    stats = await stage_inputs(MemoryStore(1 << 20), InputTree(), root, output_parents=["x"])
    assert stats.files == 0 and os.listdir(root) == []


def listing(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


@pytest.mark.parametrize("files", [2, PARALLEL_FILES])  # inline and threaded staging
async def test_existing_directories_reused_or_removed(tmp_path: Path, files: int) -> None:
    store = MemoryStore(1 << 30)
    spec: dict[str, object] = {
        "keep": {"sub": {f"f{i}": b"x" for i in range(files)}},
        "was_dir": b"now a file",
    }
    tree = await fetch_input_tree(DirectoryReader(store), await put_tree(store, spec))
    root = tmp_path / "root"
    for relative in ("keep/sub", "gone/deep/er", "was_dir", "out/obj", "stale_out"):
        (root / relative).mkdir(parents=True)
    existing = frozenset(
        {
            "keep",
            "keep/sub",
            "gone",
            "gone/deep",
            "gone/deep/er",
            "was_dir",
            "out",
            "out/obj",
            "stale_out",
        }
    )
    kept_inode = os.stat(root / "keep" / "sub").st_ino
    await stage_inputs(
        store, tree, root, output_parents=["out/obj/a.o", "new/x"], existing=existing
    )
    expected = {"keep", "keep/sub", "was_dir", "out", "out/obj", "new"}
    expected |= {f"keep/sub/f{i}" for i in range(files)}
    assert listing(root) == sorted(expected)
    assert (root / "was_dir").read_bytes() == b"now a file"
    assert os.stat(root / "keep" / "sub").st_ino == kept_inode  # reused, not remade


async def test_output_parents_of_another_package_reuse_its_directories(tmp_path: Path) -> None:
    # Consecutive compiles of two packages: the previous action's output
    # directories are moved into place, not removed and made again.
    store = MemoryStore(1 << 30)
    tree = await fetch_input_tree(
        DirectoryReader(store), await put_tree(store, {"a": {"a.c": b"int a;"}})
    )
    root = tmp_path / "root"
    before = ("b", "out", "out/b", "out/b/_objs", "out/b/_objs/b")
    for relative in before:
        (root / relative).mkdir(parents=True)
    inodes = {os.stat(root / relative).st_ino for relative in before}
    await stage_inputs(
        store, tree, root, output_parents=["out/a/_objs/a/a.o"], existing=frozenset(before)
    )
    assert listing(root) == ["a", "a/a.c", "out", "out/a", "out/a/_objs", "out/a/_objs/a"]
    after = {os.stat(root / relative).st_ino for relative in ("a", "out/a/_objs/a")}
    assert after <= inodes


async def test_an_output_parent_under_an_input_symlink_is_made_through_it(
    tmp_path: Path,
) -> None:
    store = MemoryStore(1 << 30)
    spec: dict[str, object] = {"real": {"f": b"x"}, "link": Link("real")}
    tree = await fetch_input_tree(DirectoryReader(store), await put_tree(store, spec))
    root = tmp_path / "root"
    root.mkdir()
    await stage_inputs(store, tree, root, output_parents=["link/sub/out.o"])
    assert (root / "real" / "sub").is_dir() and (root / "link").is_symlink()


async def test_existing_directories_of_an_empty_tree_are_removed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    await stage_inputs(MemoryStore(1 << 30), InputTree(), root, existing=frozenset({"a", "a/b"}))
    assert listing(root) == []


async def test_cached_directories_are_not_read_again(tmp_path: Path) -> None:
    store = FakeStore(offer=("pin", "statistics"))
    shared = {"tools": {"cc": File(b"#!/bin/sh\n", executable=True)}, "include": {"a.h": b"h"}}
    first = await put_tree(store, {**shared, "a.c": b"a"})
    second = await put_tree(store, {**shared, "b.c": b"b"})
    cache = DirectoryCache()
    reader = DirectoryReader(store, cache)
    tree = await fetch_input_tree(reader, first)
    assert len(cache) == 3  # the root and both subdirectories
    store.reads.clear()
    again = await fetch_input_tree(reader, second)
    assert store.reads == [second]  # only the new root; tools/ and include/ came from the cache
    assert [f.path for f in again.files] == ["b.c", "include/a.h", "tools/cc"]
    assert again.directories == tree.directories == ["include", "tools"]


async def test_reads_failing_in_several_lanes_raise_one_error(tmp_path: Path) -> None:
    store = FakeStore(offer=("pin", "statistics"))
    spec = {f"f{i}": f"content {i}".encode() for i in range(40)}
    plan = await fetch_input_tree(DirectoryReader(store), await put_tree(store, spec))
    store.failing = True
    (tmp_path / "root").mkdir()
    with pytest.raises(Internal, match="cannot read"):
        await stage_inputs(store, plan, tmp_path / "root")


class _AskedForLinks(FilesystemStore):
    """A filesystem store that remembers what ``path_for_link`` was asked."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[tuple[Digest, bool]] = []

    async def path_for_link(self, digest: Digest, executable: bool) -> str:
        self.asked.append((digest, executable))
        return await super().path_for_link(digest, executable)


async def test_inputs_at_hand_are_linked_without_asking_the_async_lookup(tmp_path: Path) -> None:
    store = _AskedForLinks(tmp_path / "cas", tmp_path / "cas-tmp", 1 << 30)
    await store.open()
    spec = {"plain.c": b"plain", "tool": File(b"#!/bin/sh\n", executable=True), "dir": {}}
    tree = await fetch_input_tree(DirectoryReader(store), await put_tree(store, spec))
    root = tmp_path / "root"
    root.mkdir()
    stats = await stage_inputs(store, tree, root, local_files=store)
    # The plain file's variant was stored; the executable one had to be made.
    assert [executable for _, executable in store.asked] == [True]
    assert stats.linked == 2 and stats.copied == 0
    plain = next(f for f in tree.files if f.path == "plain.c")
    stored = store.stored_path_for_link(plain.digest, False)
    assert stored is not None and os.stat(root / "plain.c").st_ino == os.stat(stored).st_ino
    # A second staging finds both at hand.
    again = tmp_path / "again"
    again.mkdir()
    store.asked.clear()
    await stage_inputs(store, tree, again, local_files=store)
    assert store.asked == []
    assert (again / "tool").read_bytes() == b"#!/bin/sh\n"
    assert os.stat(again / "tool").st_mode & 0o777 == 0o555
