"""ActionDirectories: stock made ahead, clean directories recycled (files under root
unlinked, directories kept and listed), the rest removed."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from lre.worker.directories._action_dirs import ActionDirectories, ActionDirectory
from lre.worker.directories._workdir import WorkDirectory


def entries(workdir: WorkDirectory) -> set[str]:
    return {name for name in os.listdir(workdir.path) if name != ".lock"}


@asynccontextmanager
async def janitor(workdir: WorkDirectory, stock: int) -> AsyncIterator[ActionDirectories]:
    dirs = ActionDirectories(workdir, stock=stock)
    async with trio.open_nursery() as nursery:
        await nursery.start(dirs.run)
        yield dirs
        nursery.cancel_scope.cancel()


async def settle(dirs: ActionDirectories, ready: int) -> None:
    with trio.fail_after(10):
        while dirs.pending_removal or dirs.ready < ready:  # noqa: ASYNC110 (thread work)
            await trio.sleep(0.01)


async def test_stock_is_made_ahead_and_recycled(tmp_path: Path) -> None:
    with WorkDirectory.open(tmp_path, "w") as workdir:
        async with janitor(workdir, stock=3) as dirs:
            await settle(dirs, 3)
            made = entries(workdir)
            assert len(made) == 3
            taken = await dirs.take()
            path = taken.path
            assert taken.root == path / "root" and taken.stdout == path / "stdout"
            assert path.name in made and sorted(os.listdir(path)) == ["root", "tmp"]
            assert os.stat(path / "root").st_mode & 0o777 == 0o755
            # what a finished action leaves: logs with content, empty root
            (path / "stdout").write_bytes(b"out")
            (path / "stderr").write_bytes(b"")
            await dirs.release(taken)
            await settle(dirs, 3)
            assert dirs.recycled == 1
            assert (path / "stdout").stat().st_size == 0  # truncated for the next action
            assert len(entries(workdir)) == 3  # reused, nothing new made
        assert entries(workdir) == set()  # shutdown removes the stock


async def test_dirty_directories_are_removed_not_recycled(tmp_path: Path) -> None:
    with WorkDirectory.open(tmp_path, "w") as workdir:
        async with janitor(workdir, stock=5) as dirs:
            await settle(dirs, 5)
            taken = [(await dirs.take()).path for _ in range(5)]
            (taken[0] / "root" / "sub").mkdir(mode=0o700)  # a directory staging never makes
            (taken[1] / "extra").mkdir()
            os.chmod(taken[2] / "root", 0o700)
            (taken[3] / "stdout").write_bytes(b"adopted")
            os.link(taken[3] / "stdout", tmp_path / "cas-copy")  # a store holds a link
            os.symlink("/etc/passwd", taken[4] / "stderr")
            for path in taken:
                await dirs.release(ActionDirectory.at(path))
            await settle(dirs, 5)
            assert dirs.recycled == 0
            for path in taken:
                assert not path.exists()
            assert (tmp_path / "cas-copy").read_bytes() == b"adopted"  # never truncated
            assert len(entries(workdir)) == 5


async def test_private_tmp_is_emptied_or_the_directory_removed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_bytes(b"user's")
    with WorkDirectory.open(tmp_path / "w", "w") as workdir:
        async with janitor(workdir, stock=4) as dirs:
            await settle(dirs, 4)
            taken = [await dirs.take() for _ in range(4)]
            # left behind in TMPDIR: files, a tree, a link to outside
            (taken[0].tmp / "cc1.s").write_bytes(b"x")
            (taken[0].tmp / "tree" / "deep").mkdir(parents=True)
            os.symlink(outside, taken[0].tmp / "link")
            os.chmod(taken[1].tmp, 0o777)  # not lre's 0700 directory any more
            os.rmdir(taken[2].tmp)
            os.symlink(outside, taken[2].tmp)  # replaced by a link to outside
            for directory in taken[:3]:
                await dirs.release(directory)
            await dirs.release(taken[3], reusable=False)  # something may still write
            await settle(dirs, 4)
            assert dirs.recycled == 1
            assert taken[0].path.exists() and os.listdir(taken[0].tmp) == []
            for directory in taken[1:]:
                assert not directory.path.exists()
            assert (outside / "keep").read_bytes() == b"user's"


async def test_without_janitor_release_removes_at_once(tmp_path: Path) -> None:
    with WorkDirectory.open(tmp_path, "w") as workdir:
        dirs = ActionDirectories(workdir, stock=2)
        taken = await dirs.take()  # empty stock: made on demand
        path = taken.path
        assert (path / "root").is_dir()
        (path / "root" / "f").write_bytes(b"x")
        await dirs.release(taken)
        assert not path.exists()
        assert entries(workdir) == set()


async def test_recycled_root_keeps_its_directories_and_lists_them(tmp_path: Path) -> None:
    with WorkDirectory.open(tmp_path, "w") as workdir:
        async with janitor(workdir, stock=1) as dirs:
            await settle(dirs, 1)
            taken = await dirs.take()
            assert taken.existing == frozenset()
            root = taken.root
            (root / "src" / "lib").mkdir(parents=True, mode=0o755)
            (root / "out").mkdir(mode=0o755)
            (root / "src" / "lib" / "a.h").write_bytes(b"input")
            (root / "out" / "a.o").write_bytes(b"output")
            os.symlink("/etc", root / "out" / "escape")
            await dirs.release(taken)
            await settle(dirs, 1)
            assert dirs.recycled == 1
            again = await dirs.take()
            assert again.path == taken.path
            assert again.existing == {"src", "src/lib", "out"}
            assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == [
                "out",
                "src",
                "src/lib",
            ]
            # A released directory that is taken again without new content
            # lists the same directories.
            await dirs.release(again)
            await settle(dirs, 1)
            assert (await dirs.take()).existing == {"src", "src/lib", "out"}


async def test_bursts_are_served_by_recycled_directories(tmp_path: Path) -> None:
    # Bursts of six actions against a stock of 4. Once the first burst has
    # come back, twice the stock is kept, so later bursts of the same size
    # neither make nor remove a directory.
    with WorkDirectory.open(tmp_path, "w") as workdir:
        async with janitor(workdir, stock=4) as dirs:
            await settle(dirs, 4)
            first = [await dirs.take() for _ in range(6)]
            for taken in first:
                (taken.root / "pkg").mkdir(mode=0o755)
                await dirs.release(taken)
            await settle(dirs, 6)
            names = entries(workdir)
            assert 6 <= len(names) <= 8
            for _ in range(3):
                burst = [await dirs.take() for _ in range(6)]
                for taken in burst:
                    await dirs.release(taken)
                await settle(dirs, 6)
                assert entries(workdir) == names
            # One at a time with the releases queued behind the takes: each
            # take waits for the recycling batch, none makes a directory.
            for _ in range(10):
                taken = await dirs.take()
                await dirs.release(taken)
            await settle(dirs, 6)
            assert entries(workdir) == names


async def test_a_take_waits_for_the_running_batch_instead_of_making_one(tmp_path: Path) -> None:
    with WorkDirectory.open(tmp_path, "w") as workdir:
        async with janitor(workdir, stock=1) as dirs:
            await settle(dirs, 1)
            taken = await dirs.take()
            await dirs.release(taken)  # queued; the stock is empty until it is recycled
            assert dirs.ready == 0
            again = await dirs.take()
            assert again.path == taken.path
            assert entries(workdir) == {taken.path.name}


async def wait_idle(dirs: ActionDirectories) -> None:
    with trio.fail_after(10):
        while not dirs.idle:  # noqa: ASYNC110 (thread work)
            await trio.sleep(0.01)


async def test_idle_janitor_keeps_at_most_twice_the_stock(tmp_path: Path) -> None:
    """How many ready directories stay after a burst depends on how takes and
    releases interleave with the janitor's batches (the flaky bound of 2 in
    test_execute_faults was one interleaving); once idle, never more than
    ``kept_at_most``. Here the interleaving that reaches it is driven on purpose:
    both stock directories are taken, the refill makes two more, and both
    released ones are recycled."""
    with WorkDirectory.open(tmp_path, "w") as workdir:
        async with janitor(workdir, stock=2) as dirs:
            await settle(dirs, 2)
            first = await dirs.take()
            second = await dirs.take()  # the stock is empty: the janitor refills it
            await settle(dirs, 2)
            await wait_idle(dirs)
            await dirs.release(first)
            await dirs.release(second)
            await wait_idle(dirs)
            assert dirs.kept_at_most == 4
            assert len(entries(workdir)) == dirs.ready == 4
            # another round of the same keeps the bound
            taken = [await dirs.take() for _ in range(4)]
            await settle(dirs, 2)
            for directory in taken:
                await dirs.release(directory)
            await wait_idle(dirs)
            assert len(entries(workdir)) == dirs.ready <= dirs.kept_at_most


async def test_a_take_gets_the_most_recently_recycled_directory(tmp_path: Path) -> None:
    """Consecutive actions of a build stage look alike: a take gets the
    skeleton the last recycled directory kept, not an older one's."""
    with WorkDirectory.open(tmp_path, "w") as workdir:
        async with janitor(workdir, stock=2) as dirs:
            await settle(dirs, 2)
            older, newer = await dirs.take(), await dirs.take()
            (older.root / "obj" / "m07").mkdir(parents=True, mode=0o755)
            for n in range(3):
                (newer.root / "obj" / f"m{n:02d}").mkdir(parents=True, mode=0o755)
            await dirs.release(older)
            await settle(dirs, 2)
            await dirs.release(newer)
            await settle(dirs, 2)
            again = await dirs.take()
            assert again.path == newer.path
            assert again.existing == {"obj", "obj/m00", "obj/m01", "obj/m02"}
