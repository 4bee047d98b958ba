"""open_beneath: openat2 where the kernel has it, an O_NOFOLLOW walk elsewhere;
both refuse every symlink on the way and every climb out."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from lre.worker.directories import _beneath
from lre.worker.directories._beneath import SymlinkInPath, open_beneath


@pytest.fixture(params=["openat2", "walk"])
def way(request: pytest.FixtureRequest) -> Iterator[str]:
    saved = _beneath._HAVE_OPENAT2[0]
    _beneath._HAVE_OPENAT2[0] = request.param == "openat2" and saved
    if request.param == "openat2" and not saved:
        pytest.skip("this kernel has no openat2")
    try:
        yield request.param
    finally:
        _beneath._HAVE_OPENAT2[0] = saved


@pytest.fixture
def root(tmp_path: Path) -> Iterator[int]:
    (tmp_path / "root" / "d" / "e").mkdir(parents=True)
    (tmp_path / "root" / "d" / "f").write_bytes(b"inside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f").write_bytes(b"outside")
    os.symlink(tmp_path / "outside", tmp_path / "root" / "abs")
    os.symlink("d", tmp_path / "root" / "rel")
    os.symlink("f", tmp_path / "root" / "d" / "lf")
    fd = os.open(tmp_path / "root", os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def read(root: int, relative: str) -> bytes:
    fd = open_beneath(root, relative, os.O_RDONLY)
    try:
        return os.read(fd, 100)
    finally:
        os.close(fd)


def test_plain_paths_open(way: str, root: int) -> None:
    assert read(root, "d/f") == b"inside"
    fd = open_beneath(root, "d/e", os.O_RDONLY | os.O_DIRECTORY)
    os.close(fd)
    fd = open_beneath(root, "", os.O_RDONLY | os.O_DIRECTORY)
    os.close(fd)


@pytest.mark.parametrize(
    "relative", ["abs/f", "abs", "rel/f", "rel", "d/lf", "d/../../outside/f", "../outside/f"]
)
def test_symlinks_and_climbs_are_refused(way: str, root: int, relative: str) -> None:
    for flags in (os.O_RDONLY, os.O_RDONLY | os.O_DIRECTORY):
        with pytest.raises(SymlinkInPath):
            os.close(open_beneath(root, relative, flags))


def test_missing_is_missing(way: str, root: int) -> None:
    with pytest.raises(FileNotFoundError):
        open_beneath(root, "d/nope", os.O_RDONLY)
    with pytest.raises((FileNotFoundError, NotADirectoryError)):
        open_beneath(root, "d/f/below", os.O_RDONLY)
