"""The work directory: private, locked for the worker's lifetime, emptied at start."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lre.errors import InvalidArgument
from lre.worker.directories._workdir import WorkDirectory, WorkDirectoryInUse, remove_tree


def test_created_private_with_pid_in_lock(tmp_path: Path) -> None:
    with WorkDirectory.open(tmp_path / "root", "w1") as workdir:
        assert workdir.path == tmp_path / "root" / "w1"
        assert stat.S_IMODE(os.stat(workdir.path).st_mode) == 0o700
        assert (workdir.path / ".lock").read_text().strip() == str(os.getpid())


def test_second_open_in_same_process_is_refused_naming_pid(tmp_path: Path) -> None:
    with WorkDirectory.open(tmp_path, "w1"):
        with pytest.raises(WorkDirectoryInUse, match=f"pid {os.getpid()}") as caught:
            WorkDirectory.open(tmp_path, "w1")
        assert caught.value.holder_pid == os.getpid()
    # Released on close: a new holder may take it.
    WorkDirectory.open(tmp_path, "w1").close()


def test_second_process_is_refused_naming_holder(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from lre.worker.directories._workdir import WorkDirectory, WorkDirectoryInUse\n"
        "try:\n"
        f"    WorkDirectory.open({str(tmp_path)!r}, 'w1')\n"
        "except WorkDirectoryInUse as e:\n"
        "    print(e.message); sys.exit(3)\n"
    )
    with WorkDirectory.open(tmp_path, "w1") as workdir:
        (workdir.path / "keep-me").write_text("live data")
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 3, done.stderr
        assert f"pid {os.getpid()}" in done.stdout
        # The refused process deleted nothing of the live holder.
        assert (workdir.path / "keep-me").read_text() == "live data"


def test_leftovers_removed_without_following_symlinks(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("x")
    stale = tmp_path / "root" / "w1"
    (stale / "old-action" / "sub").mkdir(parents=True)
    (stale / "old-action" / "sub" / "f").write_text("stale")
    (stale / "old-action" / "escape").symlink_to(outside)
    (stale / "toplink").symlink_to(outside)
    os.chmod(stale / "old-action" / "sub", 0o500)  # an action made it read-only
    with WorkDirectory.open(tmp_path / "root", "w1") as workdir:
        assert sorted(os.listdir(workdir.path)) == [".lock"]
    assert (outside / "precious").read_text() == "x"


def test_action_dirs(tmp_path: Path) -> None:
    with WorkDirectory.open(tmp_path, "w1") as workdir:
        path = workdir.new_action_dir("lease-1")
        (path / "f").write_text("x")
        assert workdir.new_action_dir("lease-1") == path
        assert os.listdir(path) == []
        workdir.remove_action_dir(path)
        assert not path.exists()
        with pytest.raises(InvalidArgument):
            workdir.new_action_dir("../escape")


def test_bad_worker_name(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="workers"):
        WorkDirectory.open(tmp_path, "../x")


def test_processes_left_inside_by_a_crashed_run_are_killed_at_open(tmp_path: Path) -> None:
    inside = tmp_path / "w" / "local" / "a1" / "root"
    inside.mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    # A background child of a dead run, still running inside the directory,
    # and an unrelated process next to it that must be left alone.
    left = subprocess.Popen(["sleep", "300"], cwd=inside, start_new_session=True)
    other = subprocess.Popen(["sleep", "300"], cwd=outside, start_new_session=True)
    try:
        directory = WorkDirectory.open(tmp_path / "w", "local")
        try:
            assert left.wait(timeout=10) == -signal.SIGKILL
            assert other.poll() is None
            assert sorted(p.name for p in directory.path.iterdir()) == [".lock"]
        finally:
            directory.close()
    finally:
        for proc in (left, other):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_tree_deeper_than_the_recursion_limit_is_removed(tmp_path: Path) -> None:
    # An action can leave a directory nested deeper than Python's recursion
    # limit (1,100 levels); clean-up must still remove it, without following
    # the symlinks in it.
    top = tmp_path / "deep"
    _make_deep(top)
    remove_tree(top)
    assert not top.exists()


def test_a_deep_leftover_does_not_stop_the_next_start(tmp_path: Path) -> None:
    _make_deep(tmp_path / "root" / "w1" / "a7" / "root" / "out")
    with WorkDirectory.open(tmp_path / "root", "w1") as workdir:
        assert sorted(os.listdir(workdir.path)) == [".lock"]


def _make_deep(top: Path) -> None:
    """``top`` with a chain of directories deeper than the recursion limit
    below it, each holding a file and a symlink to /."""
    top.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(top.parent, os.O_RDONLY | os.O_DIRECTORY)
    os.mkdir(top.name, dir_fd=fd)
    current = os.open(top.name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    for level in range(sys.getrecursionlimit() + 100):
        os.mkdir("d", dir_fd=current)
        os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=current))
        os.symlink("/", "up", dir_fd=current)  # never followed
        if level == 500:
            os.mkdir("locked", 0o000, dir_fd=current)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=current)
        os.close(current)
        current = child
    os.close(current)
