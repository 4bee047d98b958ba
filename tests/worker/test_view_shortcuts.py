"""The per-action work a view skips, and why skipping it is still right.

``build_view`` stats each hidden path once (``_hidden_kinds``: directory,
regular file, or neither) instead of twice; recycling tells the next view
that the overlay's layers are there (``ActionDirectory.layers``), so
``ViewPolicy.view_for`` does not look for them on the event loop.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from lre.worker._view_policy import ViewPolicy
from lre.worker.directories._action_dirs import ROOT_MODE, ActionDirectory, _recycle
from lre.worker.view._view import _hidden_kinds


def test_each_hidden_path_is_a_directory_a_file_or_neither(tmp_path: Path) -> None:
    """As ``os.path.isdir``/``isfile`` would say (symlinks followed); a FIFO,
    a dangling symlink and a missing path get no mask and no /dev/null."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("token\n")
    (tmp_path / "to-dir").symlink_to(tmp_path / "dir")
    (tmp_path / "to-file").symlink_to(tmp_path / "file")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "fifo")
    names = ("dir", "file", "to-dir", "to-file", "dangling", "fifo", "missing")
    directories, files = _hidden_kinds(tuple(str(tmp_path / n) for n in names))
    assert directories == [str(tmp_path / "dir"), str(tmp_path / "to-dir")]
    assert files == [str(tmp_path / "file"), str(tmp_path / "to-file")]


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
