"""The per-action work a view skips, and why skipping it is still right.

``build_view`` masks each hidden path with one call whatever it is (the
tmpfs's own mount tells a directory from the rest; ``stat`` runs only
after a refusal, to give a file ``/dev/null``); recycling tells the next view
that the overlay's layers are there (``ActionDirectory.layers``), so
``ViewPolicy.view_for`` does not look for them on the event loop.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lre.worker._view_policy import ViewPolicy
from lre.worker.directories._action_dirs import ROOT_MODE, ActionDirectory, _recycle, overlay_marks
from lre.worker.view._view import ActionView
from tests._support.view_thread import in_view


def test_each_hidden_path_is_masked_by_what_it_is(var_tmp: Path) -> None:
    """As ``os.path.isdir``/``isfile`` would say (symlinks followed): a
    directory shows an empty read-only tmpfs, a file (or a symlink to one)
    ``/dev/null``; a FIFO, a dangling symlink and a missing path get no
    mask, and the view is still built."""
    if os.geteuid() != 0:
        pytest.skip("build_view in this process needs CAP_SYS_ADMIN (root; CI runs as root)")
    hidden = var_tmp / "hidden"
    hidden.mkdir()
    (hidden / "dir").mkdir()
    (hidden / "dir" / "secret").write_text("s\n")
    (hidden / "file").write_text("token\n")
    (hidden / "to-dir").symlink_to(hidden / "dir")
    (hidden / "to-file").symlink_to(hidden / "file")
    (hidden / "dangling").symlink_to(hidden / "nowhere")
    os.mkfifo(hidden / "fifo")
    names = ("dir", "file", "to-dir", "to-file", "dangling", "fifo", "missing")
    action = var_tmp / "a1"
    for part in ("root", "tmp", "view/upper", "view/work"):
        (action / part).mkdir(parents=True)
    view = ActionView(
        root=str(action / "root"),
        upper=str(action / "view/upper"),
        work=str(action / "view/work"),
        tmp=str(action / "tmp"),
        xattrs="trusted",
        hidden=tuple(str(hidden / name) for name in names),
    )

    def inspect() -> dict[str, object]:
        seen: dict[str, object] = {}
        for name in names:
            path = hidden / name
            if not os.path.lexists(path):
                seen[name] = "missing"
            elif path.is_dir():
                seen[name] = ("directory", os.listdir(path), os.access(path, os.W_OK))
            elif path.exists() and stat.S_ISCHR(os.stat(path).st_mode):
                seen[name] = ("device", path.read_bytes())
            else:
                seen[name] = "as it is"
        return seen

    seen = in_view(view, inspect)
    # The mask of "dir" shows through the symlink too: "to-dir" leads there.
    assert seen == {
        "dir": ("directory", [], False),
        "to-dir": ("directory", [], False),
        "file": ("device", b""),
        "to-file": ("device", b""),
        "dangling": "as it is",
        "fifo": "as it is",
        "missing": "missing",
    }


@pytest.fixture
def var_tmp() -> Iterator[Path]:
    """A scratch directory outside ``/tmp``, which the view covers."""
    path = Path(tempfile.mkdtemp(prefix="lre-view-test-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path)


def _action_directory(path: Path, *, view: bool, work: bool = True) -> ActionDirectory:
    """A finished action's directory as a viewed (or viewless) action left it."""
    directory = ActionDirectory.at(path)
    directory.root.mkdir(parents=True, mode=ROOT_MODE)
    directory.tmp.mkdir(mode=0o700)
    os.chmod(path, 0o700)
    for name in ("stdout", "stderr"):
        (path / name).write_bytes(b"log\n")
    if view:
        directory.upper.mkdir(parents=True, mode=ROOT_MODE)
        (directory.upper / "output").write_text("o\n")
        if work:
            marker = directory.overlay_work / "work" / "incompat" / "volatile"
            marker.mkdir(parents=True)
            (marker / "dirty").write_bytes(b"")
    return directory


@pytest.mark.parametrize(
    ("view", "work", "layers"),
    [(True, True, True), (False, True, False), (True, False, False)],
    ids=["both-layers", "no-view", "no-work-directory"],
)
def test_recycling_says_whether_the_layers_are_there(
    tmp_path: Path, view: bool, work: bool, layers: bool
) -> None:
    directory = _action_directory(tmp_path / "a1", view=view, work=work)
    recycled = _recycle(directory, (os.geteuid(),))
    assert recycled is not None
    assert recycled.layers is layers
    if layers:
        assert os.listdir(recycled.upper) == []
        assert os.listdir(recycled.overlay_work) == []


def test_a_view_makes_missing_layers_unless_recycling_vouched_for_them(tmp_path: Path) -> None:
    """A new directory gets its layers made (upper at ``ROOT_MODE``, work at
    0700); one that recycling says has them is not looked at (were they
    gone, the overlay's mount would fail, naming the path)."""
    policy = ViewPolicy((), (), xattrs="trusted")
    fresh = ActionDirectory.at(tmp_path / "a1")
    fresh.root.mkdir(parents=True)
    view = policy.view_for({}, fresh)
    assert view.upper == str(fresh.upper) and view.work == str(fresh.overlay_work)
    assert stat.S_IMODE(fresh.upper.stat().st_mode) == ROOT_MODE
    assert stat.S_IMODE(fresh.overlay_work.stat().st_mode) == 0o700

    vouched = dataclasses.replace(ActionDirectory.at(tmp_path / "a2"), layers=True)
    vouched.root.mkdir(parents=True)
    policy.view_for({}, vouched)
    assert not vouched.upper.exists() and not vouched.overlay_work.exists()


def test_recycling_keeps_the_upper_directories_the_overlay_marked_as_its_own(
    tmp_path: Path,
) -> None:
    """Copied-up output parents (the overlay's marks only) stay, empty, and
    are listed; files and whiteouts go. A directory the action marked (an
    xattr of its own) empties the upper layer whole, as before."""
    marks = overlay_marks("user")
    directory = _action_directory(tmp_path / "a1", view=True)
    parent = directory.upper / "out" / "pkg"
    parent.mkdir(parents=True, mode=ROOT_MODE)
    os.chmod(directory.upper / "out", ROOT_MODE)
    os.setxattr(directory.upper / "out", "user.overlay.origin", b"o")
    (parent / "stray").write_text("s\n")
    os.mknod(directory.upper / "whiteout", stat.S_IFCHR | 0o600, os.makedev(0, 0))
    recycled = _recycle(directory, (os.geteuid(),), marks)
    assert recycled is not None and recycled.upper_dirs == {"out", "out/pkg"}
    assert sorted(p.relative_to(recycled.upper).as_posix() for p in recycled.upper.rglob("*")) == [
        "out",
        "out/pkg",
    ]

    parent.joinpath("o").write_text("o\n")
    os.setxattr(parent, "user.mine", b"x")
    again = _recycle(recycled, (os.geteuid(),), marks)
    assert again is not None and again.upper_dirs == frozenset()
    assert os.listdir(again.upper) == []

    parent.mkdir(parents=True, mode=ROOT_MODE)  # chgrp'ed by the action
    os.chown(parent, -1, os.getegid() + 1)
    once_more = _recycle(again, (os.geteuid(),), marks)
    assert once_more is not None and once_more.upper_dirs == frozenset()
    assert os.listdir(once_more.upper) == []


def test_a_view_removes_the_kept_upper_directories_its_root_lacks(tmp_path: Path) -> None:
    """Kept where the staged root has a directory; removed where it has
    nothing, a file, or a symlink to a directory (never followed: what lies
    beyond it does not save the directories below)."""
    policy = ViewPolicy((), (), xattrs="trusted")
    kept = {"same", "same/deeper", "gone", "gone/below", "file", "link", "link/inside"}
    directory = dataclasses.replace(
        ActionDirectory.at(tmp_path / "a1"), layers=True, upper_dirs=frozenset(kept)
    )
    for path in sorted(kept):
        (directory.upper / path).mkdir(parents=True)
    directory.overlay_work.mkdir()
    (directory.root / "same" / "deeper").mkdir(parents=True)
    (directory.root / "file").write_text("f\n")
    (tmp_path / "elsewhere" / "inside").mkdir(parents=True)
    (directory.root / "link").symlink_to(tmp_path / "elsewhere")
    policy.view_for({}, directory)
    left = sorted(p.relative_to(directory.upper).as_posix() for p in directory.upper.rglob("*"))
    assert left == ["same", "same/deeper"]
