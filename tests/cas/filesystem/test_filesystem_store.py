"""FilesystemStore specifics: restart, crash safety, eviction, exec variants, disk full."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from lre.cas import ContentUsage, FilesystemStore, Pin, content_usage, read_bytes
from lre.cas._blob_io import write_bytes
from lre.cas.filesystem._inline import INLINE_BYTES
from lre.digest import EMPTY_DIGEST, Digest, digest_of
from lre.errors import InvalidArgument, NotFound, ResourceExhausted
from tests._support.ci import in_ci
from tests.cas._chunks import chunked


def content_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "cas").rglob("*") if p.is_file())


async def open_store(root: Path, max_bytes: int = 1 << 30, **kwargs: object) -> FilesystemStore:
    store = FilesystemStore(root / "cas", root / "tmp", max_bytes, **kwargs)  # type: ignore[arg-type]
    await store.open()
    return store


async def test_files_are_sharded_read_only_and_named_by_digest(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    digest = await write_bytes(store, b"sharded")
    path = tmp_path / "cas" / digest.hash[:2] / f"{digest.hash}-{digest.size_bytes}"
    assert path.read_bytes() == b"sharded"
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert list((tmp_path / "tmp").iterdir()) == []


async def test_large_blob_in_many_chunks(tmp_path: Path) -> None:
    store = await open_store(tmp_path, read_chunk_size=256 << 10)
    data = os.urandom(3 << 20) + b"tail"
    digest = digest_of(data)
    await store.write(digest, chunked(data, 300_000))
    chunks = [c async for c in store.read(digest)]
    assert len(chunks) > 1
    assert b"".join(chunks) == data
    tail = [c async for c in store.read(digest, len(data) - 5, 3)]
    assert b"".join(tail) == data[-5:-2]


async def test_large_mismatch_leaves_no_temp_file(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    data = os.urandom(2 << 20)
    digest = Digest(digest_of(data).hash, len(data))
    with pytest.raises(InvalidArgument, match="hashes to"):
        await store.write(digest, chunked(b"x" + data[1:], 100_000))
    assert list((tmp_path / "tmp").iterdir()) == []
    assert content_files(tmp_path) == []
    assert store.statistics().stored_bytes == 0
    # The reservation was returned: the store can still fill up to max_bytes.
    assert store._index.reserved_bytes == 0


async def test_restart_keeps_blobs_and_lru_order(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_bytes=1000)
    digests = []
    for i in range(3):
        digests.append(await write_bytes(store, bytes([i]) * 300))
        await trio.sleep(0.02)  # distinct mtimes
    assert await store.has_many([digests[0]]) == [300]  # a use, saved by close()
    await store.close()

    reopened = await open_store(tmp_path, max_bytes=1000)
    # (has_many would count as a use, so look without touching the order.)
    assert [d in reopened._index for d in digests] == [True, True, True]
    assert reopened.statistics().stored_bytes == 900
    await write_bytes(reopened, b"\x07" * 300)  # evicts the least recently used: digests[1]
    assert await reopened.has_many(digests) == [300, None, 300]
    assert await read_bytes(reopened, digests[0]) == b"\x00" * 300


async def test_open_removes_leftovers_and_damaged_files(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    good = await write_bytes(store, b"good blob")
    (tmp_path / "tmp" / "abandoned.tmp").write_bytes(b"partial")
    damaged = digest_of(b"0123456789")
    shard = tmp_path / "cas" / damaged.hash[:2]
    (shard / f"{damaged.hash}-10").write_bytes(b"01234")  # truncated: size differs from name
    (tmp_path / "cas" / "00" / "junk").write_bytes(b"?")

    reopened = await open_store(tmp_path)
    assert await reopened.has_many([good, damaged]) == [9, None]
    assert list((tmp_path / "tmp").iterdir()) == []
    assert [p.name for p in content_files(tmp_path)] == [f"{good.hash}-9"]


def _deep(path: Path, levels: int) -> None:
    """``levels`` directories nested under ``path``, made relative to a
    descriptor (their path is longer than PATH_MAX allows at the bottom)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        with open(os.open("leaf", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "w") as leaf:
            leaf.write("x")
    finally:
        os.close(fd)


async def test_open_survives_leftover_trees_deeper_than_the_recursion_limit(
    tmp_path: Path,
) -> None:
    # lre never refuses to start over leftovers. An action running
    # as lre's user (portable containment) can leave such trees in the CAS
    # directories; shutil.rmtree recursed into them and raised RecursionError.
    store = await open_store(tmp_path)
    good = await write_bytes(store, b"good blob")
    (tmp_path / "tmp" / "deep").mkdir()
    _deep(tmp_path / "tmp" / "deep", 1200)
    (tmp_path / "tmp" / "past-path-max").mkdir()
    _deep(tmp_path / "tmp" / "past-path-max", 2100)
    (tmp_path / "cas" / "00" / "junk-dir").mkdir()
    _deep(tmp_path / "cas" / "00" / "junk-dir", 1200)

    reopened = await open_store(tmp_path)
    assert await reopened.has_many([good]) == [9]
    assert list((tmp_path / "tmp").iterdir()) == []
    assert not (tmp_path / "cas" / "00" / "junk-dir").exists()
    assert [p.name for p in content_files(tmp_path)] == [f"{good.hash}-9"]


async def test_open_never_deletes_through_a_mount_or_a_symlink_in_its_directories(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root: mounting must work")
        pytest.skip("mounting needs root")
    host = tmp_path / "users-files"
    (host / "src").mkdir(parents=True)
    (host / "src" / "main.c").write_text("int main;\n")
    await open_store(tmp_path)
    (tmp_path / "tmp" / "link").symlink_to(host)
    (tmp_path / "tmp" / "holder" / "mnt").mkdir(parents=True)
    await trio.run_process(["mount", "--bind", host, tmp_path / "tmp" / "holder" / "mnt"])
    try:
        reopened = await open_store(tmp_path)
        assert reopened.statistics().blob_count == 0
        assert (host / "src" / "main.c").read_text() == "int main;\n"
        assert not (tmp_path / "tmp" / "link").is_symlink()
        assert (tmp_path / "tmp" / "holder" / "mnt" / "src" / "main.c").exists()  # left alone
    finally:
        await trio.run_process(["umount", tmp_path / "tmp" / "holder" / "mnt"])
    assert (host / "src" / "main.c").exists()


async def test_open_evicts_when_over_a_lowered_cap(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    for i in range(4):
        await write_bytes(store, bytes([i]) * 100)
    reopened = await open_store(tmp_path, max_bytes=250)
    assert reopened.statistics().stored_bytes <= 250
    assert len(content_files(tmp_path)) == reopened.statistics().blob_count == 2


async def test_evict_to_drops_least_recently_used_down_to_the_target(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    digests = [await write_bytes(store, bytes([i]) * 100) for i in range(4)]
    await store.has_many([digests[0]])  # a use: digests[1] is now the oldest
    await store.evict_to(250)
    assert await store.has_many(digests) == [100, None, None, 100]
    assert store.statistics().max_bytes == 1 << 30  # the bound is unchanged
    assert len(content_files(tmp_path)) == 2
    with store.pin([digests[3]]):
        await store.evict_to(0)
    assert await store.has_many(digests) == [None, None, None, 100]
    await store.evict_to(0)
    assert content_files(tmp_path) == []
    assert store.statistics().stored_bytes == 0


async def test_content_usage_counts_without_changing_anything(tmp_path: Path) -> None:
    assert content_usage(str(tmp_path / "cas")) == ContentUsage(0, 0)
    store = await open_store(tmp_path)
    await write_bytes(store, b"a" * 10)
    plain = await write_bytes(store, b"b" * 20)
    await store.path_for_link(plain, executable=True)  # a second file of 20 bytes
    (tmp_path / "tmp" / "upload-in-progress").write_bytes(b"partial")
    (tmp_path / "cas" / "00" / "junk").write_bytes(b"?")
    assert content_usage(str(tmp_path / "cas")) == ContentUsage(2, 50)
    assert (tmp_path / "tmp" / "upload-in-progress").exists()
    assert (tmp_path / "cas" / "00" / "junk").exists()


async def test_content_and_temp_must_share_a_filesystem(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path / "cas", "/dev/shm/lre-test-does-not-exist", 1000)
    if os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.fail("/dev/shm is expected to be a separate filesystem here")
    with pytest.raises(Exception, match="same filesystem"):
        await store.open()
    os.rmdir("/dev/shm/lre-test-does-not-exist")


async def test_missing_file_is_noticed_on_read(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    digest = await write_bytes(store, b"will vanish")
    for path in content_files(tmp_path):
        path.unlink()
    assert await store.has_many([digest]) == [11]  # the index is not re-checked...
    with pytest.raises(NotFound, match=digest.hash):
        await read_bytes(store, digest)
    assert await store.has_many([digest]) == [None]  # ...until a read finds out
    assert store.statistics().stored_bytes == 0


async def test_reader_keeps_reading_an_evicted_blob(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_bytes=3 << 20, read_chunk_size=64 << 10)
    first = os.urandom(2 << 20)
    first_digest = await write_bytes(store, first)
    chunks = store.read(first_digest)
    received = [await chunks.__anext__()]
    await write_bytes(store, os.urandom(2 << 20))  # evicts `first` while it is being read
    assert await store.has_many([first_digest]) == [None]
    assert not any(p.name.startswith(first_digest.hash) for p in content_files(tmp_path))
    received.extend([c async for c in chunks])
    assert b"".join(received) == first


async def test_cancelled_writer_leaves_nothing(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    data = os.urandom(4 << 20)
    digest = digest_of(data)
    half_sent = trio.Event()

    async def slow_chunks() -> AsyncIterator[bytes]:
        yield data[: 2 << 20]
        yield data[2 << 20 : 3 << 20]
        half_sent.set()
        await trio.sleep_forever()
        yield data[3 << 20 :]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.write, digest, slow_chunks())
        await half_sent.wait()
        await trio.sleep(0.05)
        assert len(list((tmp_path / "tmp").iterdir())) == 1  # the upload is in its temp file
        nursery.cancel_scope.cancel()
    assert list((tmp_path / "tmp").iterdir()) == []
    assert content_files(tmp_path) == []
    assert await store.has_many([digest]) == [None]
    assert store._index.reserved_bytes == 0 and not store._index.is_busy(digest)


WRITER = textwrap.dedent(
    """
    import sys, trio
    from lre.cas import FilesystemStore
    from lre.digest import Digest

    async def main(root, hash_hex, size):
        store = FilesystemStore(root + "/cas", root + "/tmp", 1 << 30)
        await store.open()

        async def chunks():
            for _ in range(size // (1 << 20) - 1):
                yield b"\\x01" * (1 << 20)
            print("most sent", flush=True)
            await trio.sleep_forever()

        await store.write(Digest(hash_hex, size), chunks())

    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
    """
)


async def test_writer_killed_mid_write_leaves_nothing_after_reopen(tmp_path: Path) -> None:
    data = b"\x01" * (4 << 20)
    digest = digest_of(data)
    proc = subprocess.Popen(  # noqa: ASYNC220 (killed by hand below)
        [sys.executable, "-c", WRITER, str(tmp_path), digest.hash, str(digest.size_bytes)],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await trio.to_thread.run_sync(proc.stdout.readline)
        assert line == b"most sent\n"
        temp_files = list((tmp_path / "tmp").iterdir())
        assert len(temp_files) == 1 and temp_files[0].stat().st_size >= 2 << 20
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    assert content_files(tmp_path) == []
    store = await open_store(tmp_path)
    assert await store.has_many([digest]) == [None]
    assert list((tmp_path / "tmp").iterdir()) == []
    await store.write(digest, chunked(data, 1 << 20))  # and the blob can be uploaded again
    assert await read_bytes(store, digest) == data


async def test_pinned_blobs_survive_eviction(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_bytes=1000, evict_bytes=200)
    digests = [await write_bytes(store, bytes([i]) * 250) for i in range(4)]
    with store.pin(digests[:2]):
        await write_bytes(store, b"\x09" * 250)
        await write_bytes(store, b"\x0a" * 250)
        assert await store.has_many(digests) == [250, 250, None, None]
        with pytest.raises(ResourceExhausted, match="pinned"):
            await write_bytes(store, b"\x0b" * 800)
    await write_bytes(store, b"\x0b" * 800)
    assert await store.has_many(digests) == [None, None, None, None]
    assert store.statistics().stored_bytes <= 1000
    assert sum(p.stat().st_size for p in content_files(tmp_path)) == store.statistics().stored_bytes


async def test_exec_variant_has_its_own_inode(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    digest = await write_bytes(store, b"#!/bin/sh\necho hi\n")
    plain = await store.path_for_link(digest, executable=False)
    executable = await store.path_for_link(digest, executable=True)
    assert await store.path_for_link(digest, executable=True) == executable
    plain_stat, exec_stat = os.stat(plain), os.stat(executable)
    assert plain_stat.st_ino != exec_stat.st_ino
    assert stat.S_IMODE(plain_stat.st_mode) == 0o444
    assert stat.S_IMODE(exec_stat.st_mode) == 0o555
    with open(executable, "rb") as a, open(plain, "rb") as b:  # noqa: ASYNC230
        assert a.read() == b.read()
    assert store.statistics().stored_bytes == 2 * digest.size_bytes
    # A worker hardlinks a variant and changes its mode: the other variant is untouched.
    link = tmp_path / "action" / "tool"
    link.parent.mkdir()
    os.link(executable, link)
    os.chmod(link, 0o700)
    assert stat.S_IMODE(os.stat(plain).st_mode) == 0o444
    # Both variants survive a restart and count again.
    reopened = await open_store(tmp_path)
    assert reopened.statistics().stored_bytes == 2 * digest.size_bytes
    assert await reopened.path_for_link(digest, executable=True) == executable


async def test_exec_variant_of_empty_and_absent_blobs(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    empty = await store.path_for_link(EMPTY_DIGEST, executable=True)
    assert os.stat(empty).st_size == 0
    assert stat.S_IMODE(os.stat(empty).st_mode) == 0o555
    with pytest.raises(NotFound):
        await store.path_for_link(digest_of(b"absent"), executable=False)


async def test_adopt_file_moves_outputs_in(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    out = tmp_path / "out"
    out.write_bytes(b"output")
    digest = await store.adopt_file(out)
    assert digest == digest_of(b"output")
    assert not out.exists()
    assert await read_bytes(store, digest) == b"output"
    assert (tmp_path / "cas").stat().st_dev == (tmp_path / "tmp").stat().st_dev

    # Already stored: the file is consumed all the same.
    out.write_bytes(b"output")
    assert await store.adopt_file(out, digest) == digest
    assert not out.exists()

    # Executable outputs land in the executable slot without a copy.
    tool = tmp_path / "tool"
    tool.write_bytes(b"tool")
    inode = tool.stat().st_ino
    tool_digest = await store.adopt_file(tool, executable=True)
    assert os.stat(await store.path_for_link(tool_digest, executable=True)).st_ino == inode
    assert await read_bytes(store, tool_digest) == b"tool"

    # Wrong digest: refused, the file stays.
    out.write_bytes(b"other")
    with pytest.raises(InvalidArgument, match="expected"):
        await store.adopt_file(out, digest)
    assert out.read_bytes() == b"other"
    # ... also when the claimed blob is not stored yet: nothing is stored.
    claimed = digest_of(b"claimed")
    with pytest.raises(InvalidArgument, match="expected"):
        await store.adopt_file(out, claimed)
    assert out.read_bytes() == b"other"
    assert await store.has_many([claimed]) == [None]

    os.symlink(out, tmp_path / "link")
    with pytest.raises(InvalidArgument, match="symlink"):
        await store.adopt_file(tmp_path / "link")


@contextlib.contextmanager
def tiny_tmpfs(path: Path, size: str) -> Iterator[bool]:
    """Mount a tmpfs of ``size`` at ``path`` when possible (root); always unmounts."""
    path.mkdir()
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
            capture_output=True,
        ).returncode
        == 0
    )
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=True)


async def test_disk_full_is_resource_exhausted_and_reads_continue(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "small", "2m") as mounted:
        if not mounted and in_ci():
            pytest.fail("mounting a tmpfs failed under CI; the disk-full test needs root")
        root = tmp_path / "small"
        # Without a mount the store's own cap plays the full disk.
        store = await open_store(root, max_bytes=(1 << 40) if mounted else 1_900_000)
        kept = await write_bytes(store, b"kept" * 1000)
        big = os.urandom(1 << 20)
        await write_bytes(store, big)  # fits (2 MiB device, 1 MiB used)
        with store.pin([kept, digest_of(big)]):
            too_much = os.urandom(1 << 20)
            with pytest.raises(ResourceExhausted) as info:
                await store.write(digest_of(too_much), chunked(too_much, 256 << 10))
            if mounted:
                assert "no space left" in info.value.message
        assert list((root / "tmp").iterdir()) == []
        assert await store.has_many([digest_of(too_much)]) == [None]
        assert await read_bytes(store, kept) == b"kept" * 1000
        assert await read_bytes(store, digest_of(big)) == big
        # Space comes back: the same upload now succeeds.
        if mounted:
            for path in content_files(root):
                if path.stat().st_size == len(big):
                    path.unlink()
            await store.write(digest_of(too_much), chunked(too_much, 256 << 10))
            assert await read_bytes(store, digest_of(too_much)) == too_much


async def test_adopt_across_filesystems_copies(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "other", "1m") as mounted:
        if not mounted:
            if in_ci():
                pytest.fail("mounting a tmpfs failed under CI")
            other = Path("/dev/shm") / f"lre-test-{os.getpid()}"
            other.mkdir()
        else:
            other = tmp_path / "other"
        try:
            store = await open_store(tmp_path / "store")
            out = other / "out"
            out.write_bytes(b"from another filesystem")
            digest = await store.adopt_file(out)
            assert not out.exists()
            assert await read_bytes(store, digest) == b"from another filesystem"
        finally:
            if not mounted:
                for p in other.iterdir():
                    p.unlink()
                other.rmdir()


async def test_adopt_from_a_descriptor_copies_the_file_across_filesystems(
    tmp_path: Path,
) -> None:
    """The kernel copies a file of another filesystem (a tmpfs, as a view's
    outputs are) into the store; the file stays, the blob equals it."""
    with tiny_tmpfs(tmp_path / "other", "4m") as mounted:
        if not mounted:
            if in_ci():
                pytest.fail("mounting a tmpfs failed under CI")
            other = Path("/dev/shm") / f"lre-test-{os.getpid()}"
            other.mkdir()
        else:
            other = tmp_path / "other"
        try:
            store = await open_store(tmp_path / "store")
            out = other / "out"
            content = b"copied by the kernel\n" + os.urandom(2 << 20)
            out.write_bytes(content)
            fd = os.open(out, os.O_RDONLY)
            try:
                digest = await store.adopt_file(
                    out, digest_of(content), executable=True, source_fd=fd
                )
                # a second adoption of a stored blob copies nothing
                assert await store.adopt_file(out, digest, True, source_fd=fd) == digest
            finally:
                os.close(fd)
            assert out.read_bytes() == content
            assert await read_bytes(store, digest) == content
            executable = store.stored_path_for_link(digest, True)
            assert executable is not None and os.stat(executable).st_mode & 0o777 == 0o555
        finally:
            if not mounted:
                for p in other.iterdir():
                    p.unlink()
                other.rmdir()


async def test_adopt_from_a_descriptor_refuses_a_file_shorter_than_its_digest(
    tmp_path: Path,
) -> None:
    store = await open_store(tmp_path / "store")
    out = tmp_path / "out"
    out.write_bytes(b"short")
    fd = os.open(out, os.O_RDONLY)
    try:
        with pytest.raises(InvalidArgument, match="shrank"):
            await store.adopt_file(out, digest_of(b"shorter than this"), source_fd=fd)
    finally:
        os.close(fd)
    assert os.listdir(tmp_path / "store" / "tmp") == []


@settings(max_examples=15, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["write", "read", "pin", "unpin", "reopen"]), st.integers(0, 7)),
        max_size=40,
    )
)
def test_random_operations_keep_invariants(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]
) -> None:
    """Under any sequence of writes, reads, pins and restarts: the cap holds, pinned
    blobs stay, every present blob reads back exactly, files match the index."""
    root = tmp_path_factory.mktemp("random")
    blobs = [bytes([i]) * (100 + 37 * i) for i in range(8)]
    digests = [digest_of(b) for b in blobs]

    async def run() -> None:
        store = await open_store(root, max_bytes=1000)
        pins: dict[int, list[Pin]] = {}
        for op, i in ops:
            if op == "write":
                pinned_present = sum(
                    digests[j].size_bytes for j in pins if digests[j] in store._index
                )
                try:
                    await write_bytes(store, blobs[i])
                except ResourceExhausted:
                    assert pinned_present + len(blobs[i]) > 1000
            elif op == "read":
                with contextlib.suppress(NotFound):
                    assert await read_bytes(store, digests[i]) == blobs[i]
            elif op == "pin":
                pins.setdefault(i, []).append(store.pin([digests[i]]))
            elif op == "unpin" and pins.get(i):
                pins[i].pop().release()
                if not pins[i]:
                    del pins[i]
            elif op == "reopen":
                await store.close()
                for held in pins.values():
                    for pin in held:
                        pin.release()
                store = await open_store(root, max_bytes=1000)
                pins = {j: [store.pin([digests[j]]) for _ in held] for j, held in pins.items()}
            stats = store.statistics()
            assert stats.stored_bytes <= 1000
            sizes = await store.has_many(digests)
            present = {j for j, s in enumerate(sizes) if s is not None}
            assert stats.stored_bytes == sum(digests[j].size_bytes for j in present)
            assert sorted(p.name for p in content_files(root)) == sorted(
                f"{digests[j].hash}-{digests[j].size_bytes}" for j in present
            )
            for j in present:
                assert await read_bytes(store, digests[j]) == blobs[j]

    trio.run(run)


def test_thread_limiter_bounds_threads(tmp_path: Path) -> None:
    """Many concurrent writers use at most the limiter's threads."""
    import threading

    async def run() -> None:
        limiter = trio.CapacityLimiter(3)
        store = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 1 << 30, thread_limiter=limiter)
        await store.open()
        peak = 0

        async def one(i: int) -> None:
            nonlocal peak
            await write_bytes(store, i.to_bytes(4, "big") * 1024)
            peak = max(peak, threading.active_count())

        before = threading.active_count()
        async with trio.open_nursery() as nursery:
            for i in range(500):
                nursery.start_soon(one, i)
        assert peak - before <= 3
        assert store.statistics().blob_count == 500

    start = time.monotonic()
    trio.run(run)
    assert time.monotonic() - start < 30


async def test_discard_forgets_both_variants_until_written_again(
    tmp_path: Path,
) -> None:
    store = await open_store(tmp_path)
    data = b"soon tainted"
    digest = await write_bytes(store, data)
    plain = await store.path_for_link(digest, executable=False)
    await store.path_for_link(digest, executable=True)
    assert len(content_files(tmp_path)) == 2
    assert await store.discard(digest, executable=False)
    assert await store.has_many([digest]) == [None]
    assert content_files(tmp_path) == []  # both variants unlinked
    with pytest.raises(NotFound):
        await read_bytes(store, digest)
    with pytest.raises(NotFound):
        await store.path_for_link(digest, executable=False)
    assert store.statistics().stored_bytes == 0
    assert not await store.discard(digest, executable=False)  # already gone
    await write_bytes(store, data)
    assert await read_bytes(store, digest) == data
    fresh = await store.path_for_link(digest, executable=False)
    assert fresh == plain
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o444


async def test_uses_seen_on_another_thread_count_before_eviction(tmp_path: Path) -> None:
    """A FindMissingBlobs answered on the gRPC thread is a use: the blob it
    found is not the next one evicted, although the lookup only queued it."""
    store = await open_store(tmp_path, max_bytes=2000)
    first = await write_bytes(store, b"a" * 900)
    second = await write_bytes(store, b"b" * 900)

    def lookup() -> list[int | None] | None:
        return store.sizes_now([first.hash], [first.size_bytes])

    assert await trio.to_thread.run_sync(lookup) == [900]
    assert await trio.to_thread.run_sync(store.read_now, first, 0, 0) == b"a" * 900
    await write_bytes(store, b"c" * 900)  # room for two: the least recently used goes
    assert await store.has_many([first, second]) == [900, None]


async def test_answers_from_another_thread_are_none_when_not_simple(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 1 << 20)
    assert store.sizes_now([], []) is None  # not open yet
    await store.open()
    small = await write_bytes(store, b"0123456789")
    assert store.read_now(small, 4, 3) == b"456"
    assert store.read_now(small, 10, 0) == b""
    assert store.read_now(small, 11, 0) is None  # a bad range: read() raises it
    assert store.read_now(small, -1, 0) is None
    assert store.read_now(digest_of(b"absent"), 0, 0) is None
    big = await write_bytes(store, b"x" * (INLINE_BYTES + 1))
    assert store.read_now(big, 0, 0) is None
    assert store.read_now(big, 0, 100) == b"x" * 100


@pytest.mark.parametrize(
    ("size", "fsync", "threaded"),
    [(INLINE_BYTES, "never", False), (INLINE_BYTES + 1, "never", True), (100, "always", True)],
)
async def test_a_small_missing_variant_is_copied_without_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, fsync: str, threaded: bool
) -> None:
    # Bazel 4 marks every input executable: the executable copy of a source a
    # user just uploaded is made at its first staging. A small one is made on
    # the event loop (as small writes are); a large one, or any with fsync on,
    # in a thread.
    store = await open_store(tmp_path, fsync=fsync)
    data = os.urandom(size)
    digest = await write_bytes(store, data)
    in_threads: list[str] = []
    run_sync = trio.to_thread.run_sync

    async def recording(fn: object, *args: object, **kwargs: object) -> object:
        in_threads.append(getattr(fn, "__name__", repr(fn)))
        return await run_sync(fn, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(trio.to_thread, "run_sync", recording)
    path = await store.path_for_link(digest, executable=True)
    assert ("copy_variant" in in_threads) is threaded
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o555
    assert await trio.Path(path).read_bytes() == data
    assert os.stat(path).st_ino != os.stat(await store.path_for_link(digest, False)).st_ino


async def test_stored_path_for_link_answers_only_for_a_stored_variant(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    digest = await write_bytes(store, b"int main(void) { return 0; }\n")
    assert store.stored_path_for_link(digest, False) == await store.path_for_link(digest, False)
    assert store.stored_path_for_link(digest, True) is None  # not made yet: nothing copied
    executable = await store.path_for_link(digest, True)
    assert store.stored_path_for_link(digest, True) == executable
    assert store.stored_path_for_link(digest_of(b"absent"), False) is None
    assert store.stored_path_for_link(Digest(digest.hash, digest.size_bytes + 1), False) is None


async def test_stored_path_for_link_counts_as_a_use(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_bytes=1000)
    first, second, third, fourth = [await write_bytes(store, bytes([i]) * 250) for i in range(1, 5)]
    assert store.stored_path_for_link(first, False) is not None  # now the most recent
    await write_bytes(store, b"\x05" * 250)  # evicts the least recently used
    sizes = await store.has_many([first, second, third, fourth])
    assert sizes[0] == 250 and sizes[1] is None
