"""scrub_root: files go, directories stay, anything unusual means "remove instead";
plan_directories: the kept directories become the next tree's, by rename where possible."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from lre.worker.directories._skeleton import (
    MAX_KEPT_DIRECTORIES,
    DirectoryPlan,
    plan_directories,
    scrub_root,
)


def make_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for relative in ("src", "out/obj/deep", "empty"):
        (root / relative).mkdir(parents=True, mode=0o755)
    os.chmod(root, 0o755)
    (root / "src" / "a.c").write_bytes(b"int a;")
    (root / "out" / "obj" / "a.o").write_bytes(b"obj")
    (root / "top").write_bytes(b"x")
    os.chmod(root / "top", 0o444)
    os.mkfifo(root / "out" / "fifo")
    return root


def test_files_unlinked_directories_kept(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    kept = scrub_root(root)
    assert kept == {"src", "out", "out/obj", "out/obj/deep", "empty"}
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == sorted(kept)


def test_symlinks_are_unlinked_never_followed(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "keep").write_bytes(b"precious")
    os.symlink(outside, root / "dirlink")
    os.symlink(outside / "keep", root / "src" / "filelink")
    os.symlink("/nonexistent", root / "dangling")
    kept = scrub_root(root)
    assert kept is not None and "dirlink" not in kept
    assert not os.path.lexists(root / "dirlink") and not os.path.lexists(root / "dangling")
    assert (outside / "keep").read_bytes() == b"precious" and (outside / "sub").is_dir()


def test_hardlinked_inputs_lose_only_their_link(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    cas_copy = tmp_path / "cas-copy"
    cas_copy.write_bytes(b"content")
    os.link(cas_copy, root / "src" / "linked")
    assert scrub_root(root) is not None
    assert cas_copy.read_bytes() == b"content" and os.stat(cas_copy).st_nlink == 1


@pytest.mark.parametrize("mode", [0o700, 0o555, 0o2755, 0o777])
def test_a_directory_with_another_mode_is_not_reused(tmp_path: Path, mode: int) -> None:
    root = make_root(tmp_path)
    os.chmod(root / "out" / "obj", mode)
    try:
        assert scrub_root(root) is None
    finally:
        os.chmod(root / "out" / "obj", 0o755)


def test_root_with_another_mode_is_not_reused(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    os.chmod(root, 0o700)
    assert scrub_root(root) is None


def test_root_that_is_a_symlink_is_not_followed(tmp_path: Path) -> None:
    real = make_root(tmp_path)
    link = tmp_path / "link"
    os.symlink(real, link)
    assert scrub_root(link) is None
    assert (real / "top").exists()  # nothing touched through the link


def test_a_directory_with_extended_attributes_is_not_reused(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    os.setxattr(root / "src", "user.lre-test", b"1")
    assert scrub_root(root) is None


def test_a_directory_owned_by_someone_else_is_not_reused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a directory away (so can an action only when lre is root)")
    root = make_root(tmp_path)
    os.chown(root / "empty", 65534, 65534)
    assert scrub_root(root) is None


def test_too_many_directories_are_not_kept(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    for index in range(MAX_KEPT_DIRECTORIES + 1):
        (root / f"d{index}").mkdir(mode=0o755)
    assert scrub_root(root) is None


def test_missing_root(tmp_path: Path) -> None:
    assert scrub_root(tmp_path / "absent") is None


def apply(root: Path, plan: DirectoryPlan) -> None:
    for source, target in plan.steps:
        if source is None:
            os.mkdir(root / target, 0o755)
        else:
            os.rename(root / source, root / target)
    for relative in plan.removals:
        os.rmdir(root / relative)


def tree_of(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def test_another_package_is_made_by_renames_only() -> None:
    # The previous action compiled package b; this one compiles package a.
    existing = frozenset({"bin", "bin/b", "bin/b/_objs", "bin/b/_objs/b", "inc"})
    needed = ["inc", "bin", "bin/a", "bin/a/_objs", "bin/a/_objs/a"]
    plan = plan_directories(existing, needed)
    assert [source is not None for source, _ in plan.steps] == [True, True, True]
    assert [target for _, target in plan.steps] == ["bin/a", "bin/a/_objs", "bin/a/_objs/a"]
    assert plan.removals == [] and len(plan) == 3


def test_missing_directories_are_made_when_nothing_is_spare() -> None:
    plan = plan_directories(frozenset({"a"}), ["a", "a/b", "c"])
    assert plan.steps == [(None, "a/b"), (None, "c")] and plan.removals == []


def test_leftovers_are_removed_deepest_first() -> None:
    plan = plan_directories(frozenset({"x", "x/y", "x/y/z", "keep"}), ["keep"])
    assert plan.steps == [] and plan.removals == ["x/y/z", "x/y", "x"]


@pytest.mark.parametrize("seed", range(40))
def test_any_plan_applied_on_disk_gives_exactly_the_needed_tree(tmp_path: Path, seed: int) -> None:
    chooser = random.Random(seed)
    names = ["a", "b", "c"]

    def random_tree() -> list[str]:
        found: list[str] = []
        frontier = [""]
        while frontier and len(found) < 12:
            parent = frontier.pop(0)
            for name in chooser.sample(names, chooser.randint(0, 2)):
                path = f"{parent}/{name}" if parent else name
                found.append(path)
                frontier.append(path)
        return found

    before, after = random_tree(), random_tree()
    root = tmp_path / "root"
    root.mkdir()
    for relative in before:
        (root / relative).mkdir()
    inodes = {os.stat(root / relative).st_ino for relative in before}
    plan = plan_directories(frozenset(before), after)
    apply(root, plan)
    assert tree_of(root) == set(after)
    made = sum(source is None for source, _ in plan.steps)
    spare = len(set(before) - set(after))
    assert made == max(0, len(set(after) - set(before)) - spare)
    new_inodes = {os.stat(root / relative).st_ino for relative in after} - inodes
    assert len(new_inodes) == made  # every other directory is an old one, moved or kept
