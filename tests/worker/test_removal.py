"""Clean-up of what actions leave: iterative, descriptor-based, never across a
mount and never through a symlink (``lre/worker/directories/_removal.py``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lre.worker.directories._removal import CrossesMount, MountTable
from lre.worker.directories._workdir import WorkDirectory, remove_tree

DEPTH = 1_200
#: 1,200 levels of this are 25 KB of path: far past PATH_MAX (4096).
LEVEL = "d" * 20


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs as root; {what} needs root")
        pytest.skip(f"{what} needs root")


def make_deep(top: Path, depth: int = DEPTH) -> None:
    """``top``/LEVEL/LEVEL/... ``depth`` levels, a file every 100 (made
    through descriptors: the path is too long to name)."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth):
            os.mkdir(LEVEL, dir_fd=fd)
            child = os.open(LEVEL, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
            if level % 100 == 0:
                os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def mounted_below(directory: Path) -> list[str]:
    return MountTable().below(directory)


def scrub(tmp_path: Path) -> None:
    """Undo what the test made that pytest's own clean-up cannot remove
    (mounts, immutable files, trees deeper than its recursion limit)."""
    for point in mounted_below(tmp_path):
        subprocess.run(["umount", "-l", point], check=False)
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-R", "-i", str(tmp_path)], check=False, capture_output=True)
    for entry in tmp_path.iterdir():
        try:
            remove_tree(entry)
        except OSError:
            pass


@pytest.fixture(autouse=True)
def scrubbed(tmp_path: Path) -> Iterator[None]:
    yield
    scrub(tmp_path)


@pytest.fixture
def host_files(tmp_path: Path) -> Path:
    """A directory of the user's, outside lre's, with a file in it."""
    host = tmp_path / "users-files"
    (host / "sub").mkdir(parents=True)
    (host / "precious").write_text("keep me\n")
    (host / "sub" / "also").write_text("keep me too\n")
    return host


def test_a_tree_deeper_than_the_recursion_limit_and_path_max_is_removed(tmp_path: Path) -> None:
    top = tmp_path / "deep"
    make_deep(top)
    remove_tree(top)
    assert not top.exists()


def test_unreadable_directories_of_lres_own_are_removed(tmp_path: Path) -> None:
    top = tmp_path / "locked"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f").write_text("x")
    os.chmod(top / "a" / "b", 0)
    os.chmod(top / "a", 0)
    remove_tree(top)
    assert not top.exists()


def test_a_symlink_to_a_host_directory_is_unlinked_not_followed(
    tmp_path: Path, host_files: Path
) -> None:
    top = tmp_path / "links"
    (top / "d").mkdir(parents=True)
    (top / "d" / "to-host").symlink_to(host_files)
    (top / "to-host").symlink_to(host_files)
    remove_tree(top)
    assert not top.exists()
    assert (host_files / "precious").read_text() == "keep me\n"


def test_removal_never_deletes_through_a_bind_mount(tmp_path: Path, host_files: Path) -> None:
    # The same filesystem bind-mounted: st_dev alone cannot see it, the mount id does.
    need_root("mounting")
    top = tmp_path / "action"
    (top / "root" / "mnt").mkdir(parents=True)
    (top / "root" / "own").write_text("lre's")
    subprocess.run(["mount", "--bind", str(host_files), str(top / "root" / "mnt")], check=True)
    with pytest.raises(CrossesMount, match="mount point"):
        remove_tree(top)
    assert (host_files / "precious").read_text() == "keep me\n"
    assert (host_files / "sub" / "also").exists()


def test_an_action_directory_holding_a_mount_is_detached_then_removed(
    tmp_path: Path, host_files: Path
) -> None:
    need_root("mounting")
    with WorkDirectory.open(tmp_path / "work", "w") as workdir:
        action = workdir.new_action_dir("a1")
        tmpfs, bind = action / "root" / "tmpfs", action / "root" / "bind"
        tmpfs.mkdir(parents=True)
        bind.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(tmpfs)], check=True)
        subprocess.run(["mount", "--bind", str(host_files), str(bind)], check=True)
        workdir.remove_action_dir(action)
        assert not action.exists()
        assert mounted_below(workdir.path) == []
    assert (host_files / "precious").read_text() == "keep me\n"
    assert (host_files / "sub" / "also").exists()


def test_a_quarantine_swapped_for_a_symlink_is_never_followed(
    tmp_path: Path, host_files: Path
) -> None:
    need_root("chattr +i")
    with WorkDirectory.open(tmp_path / "work", "w") as workdir:
        (workdir.path / ".quarantine").symlink_to(host_files)
        action = workdir.new_action_dir("a1")
        (action / "immutable").write_text("x")
        subprocess.run(["chattr", "+i", str(action / "immutable")], check=True)
        workdir.remove_action_dir(action)  # quarantined, not removed
        assert workdir.quarantine.retry() != []
        assert (workdir.path / ".quarantine").is_dir()
        assert not (workdir.path / ".quarantine").is_symlink()
    assert (host_files / "precious").read_text() == "keep me\n"
    assert (host_files / "sub" / "also").exists()
    assert sorted(p.name for p in host_files.iterdir()) == ["precious", "sub"]


_AS_NOBODY = """
import os, sys
from pathlib import Path
from lre.worker import quarantined
from lre.worker.directories._workdir import WorkDirectory
top = Path(sys.argv[1])
with WorkDirectory.open(top / "work", "w") as workdir:
    print(sorted(os.listdir(workdir.path)))
    print([entry.path.name.split(".")[0] for entry in quarantined(workdir.path)])
"""


def test_an_unprivileged_lre_removes_its_mode_000_leftovers_and_quarantines_roots(
    tmp_path: Path,
) -> None:
    # lre as nobody: a leftover tree of its own with modes 000 and 0500 is
    # removed (owner bits given back first); one holding a directory of
    # root's that it may not change is quarantined, and lre starts.
    need_root("switching to nobody")
    import shutil
    import sys
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="lre-nobody-"))  # nobody cannot enter pytest's dirs
    os.chmod(top, 0o755)
    try:
        worker = top / "work" / "w"
        (worker / "a1" / "root" / "x" / "y").mkdir(parents=True)
        (worker / "a1" / "root" / "x" / "y" / "f").write_text("x")
        (worker / "a2" / "root" / "theirs").mkdir(parents=True)
        (worker / "a2" / "root" / "theirs" / "f").write_text("x")
        for path in (top / "work", *sorted(top.glob("work/**/*"))):
            if path.name != "theirs" and path.parent.name != "theirs":
                os.chown(path, 65534, 65534)
        os.chmod(worker / "a1" / "root" / "x" / "y", 0)
        os.chmod(worker / "a1" / "root" / "x", 0o500)
        os.chmod(worker / "a2" / "root" / "theirs", 0o755)
        ran = subprocess.run(
            [
                *("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"),
                *(sys.executable, "-c", _AS_NOBODY, str(top)),
            ],
            capture_output=True,
            text=True,
            cwd="/",
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(Path(__file__).parents[2])},
            timeout=60,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        listing, kept = ran.stdout.splitlines()[-2:]
        assert listing == "['.lock', '.quarantine']", ran.stdout
        assert kept == "['a2']", ran.stdout
    finally:
        shutil.rmtree(top)
