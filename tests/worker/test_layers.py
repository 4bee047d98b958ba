"""Merging an overlay's upper and lower layers again, one directory at a
time (the seam ``scan_outputs`` reads through; its cases through whole
outputs are in test_outputs.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lre.worker.directories._beneath import SymlinkInPath
from lre.worker.outputs._layers import MergedDir, OverlayXattrs, walk


def _root(tmp_path: Path) -> tuple[Path, Path, MergedDir]:
    upper, lower = tmp_path / "upper", tmp_path / "lower"
    for layer in (upper, lower):
        (layer / "a" / "b").mkdir(parents=True)
    return upper, lower, MergedDir.open_root(upper, lower, xattrs="trusted")


def test_a_path_is_followed_through_both_layers_and_into_the_lower_one(tmp_path: Path) -> None:
    _upper, lower, root = _root(tmp_path)
    (lower / "a" / "b" / "c").mkdir()
    (lower / "a" / "b" / "c" / "f").write_bytes(b"f")
    try:
        merged = walk(root, "a/b/c", "a/b/c/f")
        assert merged is not None and merged.upper is None and merged.lower is not None
        entry = merged.lookup("f")
        assert entry is not None and entry.from_lower
        merged.close()
    finally:
        root.close()


def test_an_upper_file_on_the_path_ends_it_even_over_a_lower_directory(tmp_path: Path) -> None:
    upper, lower, root = _root(tmp_path)
    (lower / "a" / "b" / "c").mkdir()
    (upper / "a" / "b" / "c").write_bytes(b"a file now")
    try:
        assert walk(root, "a/b/c", "a/b/c/f") is None
    finally:
        root.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="whiteouts need root")
def test_a_whiteout_on_the_path_ends_it(tmp_path: Path) -> None:
    upper, _lower, root = _root(tmp_path)
    (upper / "a" / "b").rmdir()
    os.mknod(upper / "a" / "b", stat.S_IFCHR, 0)
    try:
        assert walk(root, "a/b", "a/b/f") is None
        assert [e.name for e in root.listing()] == ["a"]
        a = walk(root, "a", "a")
        assert a is not None and a.listing() == [] and a.lookup("b") is None
        a.close()
    finally:
        root.close()


@pytest.mark.parametrize("layer", ["upper", "lower"])
def test_a_symlink_on_the_path_in_either_layer_is_refused(tmp_path: Path, layer: str) -> None:
    upper, lower, root = _root(tmp_path)
    os.symlink(tmp_path, (upper if layer == "upper" else lower) / "a" / "link")
    try:
        with pytest.raises(SymlinkInPath):
            walk(root, "a/link", "a/link/f")
        with pytest.raises(SymlinkInPath):
            walk(root, "a/../a", "a/../a/f")
    finally:
        root.close()


@pytest.mark.parametrize("xattrs", ["user", "trusted"])
def test_an_opaque_mark_counts_only_in_the_overlays_own_namespace(
    tmp_path: Path, xattrs: OverlayXattrs
) -> None:
    # What a userxattr overlay (userns) leaves for ``rm -rf a/b; mkdir a/b``;
    # a trusted.* overlay would not have made it, so there it is no mark.
    upper, lower = tmp_path / "upper", tmp_path / "lower"
    for layer in (upper, lower):
        (layer / "a" / "b").mkdir(parents=True)
    (lower / "a" / "b" / "old").write_bytes(b"old")
    (upper / "a" / "b" / "new").write_bytes(b"new")
    os.setxattr(upper / "a" / "b", "user.overlay.opaque", b"y")
    root = MergedDir.open_root(upper, lower, xattrs=xattrs)
    try:
        merged = walk(root, "a/b", "a/b")
        assert merged is not None and merged.xattrs == xattrs
        names = [entry.name for entry in merged.listing()]
        assert names == (["new"] if xattrs == "user" else ["new", "old"])
        assert (merged.lower is None) == (xattrs == "user")
        merged.close()
    finally:
        root.close()
