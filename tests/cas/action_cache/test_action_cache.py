"""Action caches and the completeness check of ActionResultCache."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from lre.cas import (
    ActionCache,
    ActionResultCache,
    ContentUsage,
    FilesystemActionCache,
    FilesystemStore,
    MemoryActionCache,
    MemoryStore,
    write_message,
)
from lre.cas._blob_io import write_bytes
from lre.cas.action_cache._log import LOG_NAME, ActionLog
from lre.digest import Digest, digest_of
from lre.errors import InvalidArgument, MissingBlobs, ResourceExhausted
from lre.proto import re_pb2

ACTION = digest_of(b"an action")


@pytest.fixture(params=["memory", "filesystem"])
async def action_cache(request: pytest.FixtureRequest, tmp_path: Path) -> ActionCache:
    if request.param == "memory":
        return MemoryActionCache(1 << 20)
    cache = FilesystemActionCache(tmp_path / "ac")
    await cache.open()
    return cache


async def test_get_put_replace(action_cache: ActionCache) -> None:
    assert await action_cache.get(ACTION) is None
    await action_cache.put(ACTION, b"first")
    await action_cache.put(ACTION, b"second")
    assert await action_cache.get(ACTION) == b"second"
    assert await action_cache.get(digest_of(b"other")) is None


async def test_filesystem_action_cache_survives_restart_and_cleans_temp(tmp_path: Path) -> None:
    cache = FilesystemActionCache(tmp_path / "ac")
    await cache.open()
    await cache.put(ACTION, b"kept")
    (tmp_path / "ac" / "tmp" / "leftover").write_bytes(b"partial")
    reopened = FilesystemActionCache(tmp_path / "ac")
    await reopened.open()
    assert await reopened.get(ACTION) == b"kept"
    assert list((tmp_path / "ac" / "tmp").iterdir()) == []


async def test_filesystem_action_cache_usage_and_clear(tmp_path: Path) -> None:
    cache = FilesystemActionCache(tmp_path / "ac")
    assert await cache.usage() == ContentUsage(0, 0)  # nothing on disk yet
    await cache.open()
    await cache.put(ACTION, b"one")
    await cache.put(digest_of(b"another action"), b"three")
    (tmp_path / "ac" / "tmp" / "leftover").write_bytes(b"partial")
    (tmp_path / "ac" / "00").mkdir(exist_ok=True)
    (tmp_path / "ac" / "00" / "notes.txt").write_bytes(b"not an entry")
    assert await cache.usage() == ContentUsage(2, 8)
    assert await cache.get(ACTION) == b"one"  # counting changed nothing

    assert await cache.clear() == ContentUsage(2, 8)
    assert await cache.get(ACTION) is None
    assert await cache.usage() == ContentUsage(0, 0)
    assert list((tmp_path / "ac" / "tmp").iterdir()) == []
    assert (tmp_path / "ac" / "00" / "notes.txt").exists()  # only entries are deleted
    await cache.put(ACTION, b"again")  # still usable
    assert await cache.get(ACTION) == b"again"


async def test_filesystem_action_cache_reads_a_large_entry_in_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small entries are read on the event loop; one above the inline limit
    (a result listing thousands of outputs) must not block it."""
    cache = FilesystemActionCache(tmp_path / "ac")
    await cache.open()
    small, large = b"s" * 100, bytes(range(256)) * 1024  # 256 KiB
    other = digest_of(b"large entry")
    await cache.put(ACTION, small)
    await cache.put(other, large)
    reader_threads: list[bool] = []
    read = ActionLog.read

    def spy(self: ActionLog, key: str) -> bytes | None:
        reader_threads.append(threading.current_thread() is threading.main_thread())
        return read(self, key)

    monkeypatch.setattr(ActionLog, "read", spy)
    assert await cache.get(ACTION) == small
    assert reader_threads == [True]
    assert await cache.get(other) == large
    assert reader_threads == [True, False]


def _log_file(tmp_path: Path) -> Path:
    return tmp_path / "ac" / LOG_NAME


async def test_one_file_and_no_file_per_entry(tmp_path: Path) -> None:
    """Storing a result appends to the log; it makes no file per entry."""
    cache = FilesystemActionCache(tmp_path / "ac")
    await cache.open()
    for i in range(20):
        await cache.put(digest_of(b"action %d" % i), b"result %d" % i)
    assert sorted(p.name for p in (tmp_path / "ac").iterdir()) == [LOG_NAME, "tmp"]
    assert await cache.digests() == [digest_of(b"action %d" % i) for i in range(20)]


async def test_a_torn_last_record_is_cut_and_the_rest_kept(tmp_path: Path) -> None:
    """lre killed in the middle of a write: the records before it survive,
    the torn one is never served, and the next put lands after a clean cut."""
    cache = FilesystemActionCache(tmp_path / "ac")
    await cache.open()
    await cache.put(ACTION, b"kept result")
    torn = digest_of(b"torn")
    await cache.put(torn, b"x" * 200)
    log_path = _log_file(tmp_path)
    size = log_path.stat().st_size
    os.truncate(log_path, size - 50)  # the second record loses its tail

    reopened = FilesystemActionCache(tmp_path / "ac")
    await reopened.open()
    assert await reopened.get(ACTION) == b"kept result"
    assert await reopened.get(torn) is None
    await reopened.put(torn, b"written again")
    again = FilesystemActionCache(tmp_path / "ac")
    await again.open()
    assert await again.get(torn) == b"written again"
    assert await again.get(ACTION) == b"kept result"


async def test_a_damaged_entry_reads_as_absent(tmp_path: Path) -> None:
    """A byte flipped on disk under a result: never served, on the open cache
    (checked at read) nor after a restart (checked at the scan)."""
    cache = FilesystemActionCache(tmp_path / "ac")
    await cache.open()
    await cache.put(ACTION, b"exit code 0, outputs a b c")
    log_path = _log_file(tmp_path)
    raw = bytearray(log_path.read_bytes())
    at = raw.index(b"exit code 0")
    raw[at] ^= 0x01
    log_path.write_bytes(bytes(raw))
    assert await cache.get(ACTION) is None
    reopened = FilesystemActionCache(tmp_path / "ac")
    await reopened.open()
    assert await reopened.get(ACTION) is None


@pytest.mark.parametrize("where", ["magic", "key length", "key", "value"])
async def test_a_damaged_first_record_costs_only_itself(tmp_path: Path, where: str) -> None:
    """One byte flipped in the first of three records (header or body): after
    a restart the other two are still served, the damaged one is absent, and
    new records land after them."""
    cache = FilesystemActionCache(tmp_path / "ac")
    await cache.open()
    actions = [digest_of(b"action %d" % i) for i in range(3)]
    for i, action in enumerate(actions):
        await cache.put(action, b"result %d of the build" % i)
    log_path = _log_file(tmp_path)
    raw = bytearray(log_path.read_bytes())
    offset = {"magic": 1, "key length": 4, "key": 20, "value": raw.index(b"result 0")}[where]
    raw[offset] ^= 0x40
    log_path.write_bytes(bytes(raw))

    reopened = FilesystemActionCache(tmp_path / "ac")
    await reopened.open()
    assert await reopened.get(actions[0]) is None
    assert await reopened.get(actions[1]) == b"result 1 of the build"
    assert await reopened.get(actions[2]) == b"result 2 of the build"
    assert log_path.stat().st_size == len(raw)  # nothing was cut
    later = digest_of(b"later")
    await reopened.put(later, b"later result")
    again = FilesystemActionCache(tmp_path / "ac")
    await again.open()
    assert await again.get(later) == b"later result"
    assert await again.get(actions[2]) == b"result 2 of the build"


async def test_entries_of_the_older_layout_move_into_the_log(tmp_path: Path) -> None:
    """An upgrade keeps the results a file-per-entry cache held."""
    old = digest_of(b"old action")
    shard = tmp_path / "ac" / old.hash[:2]
    shard.mkdir(parents=True)
    (shard / f"{old.hash}-{old.size_bytes}").write_bytes(b"old result")
    cache = FilesystemActionCache(tmp_path / "ac")
    assert await cache.usage() == ContentUsage(1, 10)
    await cache.open()
    assert await cache.get(old) == b"old result"
    assert not shard.exists()
    reopened = FilesystemActionCache(tmp_path / "ac")
    await reopened.open()
    assert await reopened.get(old) == b"old result"


async def test_replaced_records_are_rewritten_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same actions stored again and again (a benchmark, a flaky test
    rerun with --noremote_accept_cached) do not grow the file without end."""
    monkeypatch.setattr(ActionLog, "compact_after_dead_bytes", 1000)
    cache = FilesystemActionCache(tmp_path / "ac")
    await cache.open()
    for round_ in range(50):
        for i in range(4):
            await cache.put(digest_of(b"action %d" % i), b"result %d of round %03d" % (i, round_))
    assert _log_file(tmp_path).stat().st_size < 4 * 2 * 200
    for i in range(4):
        assert await cache.get(digest_of(b"action %d" % i)) == b"result %d of round 049" % i
    reopened = FilesystemActionCache(tmp_path / "ac")
    await reopened.open()
    assert await reopened.get(digest_of(b"action 3")) == b"result 3 of round 049"


async def test_max_bytes_drops_the_oldest_results(tmp_path: Path) -> None:
    cache = FilesystemActionCache(tmp_path / "ac", max_bytes=1000)
    await cache.open()
    actions = [digest_of(b"action %d" % i) for i in range(30)]
    for action in actions:
        await cache.put(action, b"r" * 100)
    usage = await cache.usage()
    assert usage.stored_bytes <= 1000
    assert await cache.get(actions[-1]) == b"r" * 100
    assert await cache.get(actions[0]) is None
    kept = await cache.digests()
    assert kept == actions[len(actions) - len(kept) :]  # the newest survive


async def test_another_writer_on_the_same_file_loses_nothing(tmp_path: Path) -> None:
    """Two caches appending to one file (two configurations naming one
    directory): each reads its own results, and neither rewrites the file
    under the other."""
    first = FilesystemActionCache(tmp_path / "ac", max_bytes=1000)
    second = FilesystemActionCache(tmp_path / "ac", max_bytes=1000)
    await first.open()
    await second.open()
    for i in range(30):
        await first.put(digest_of(b"first %d" % i), b"1" * 100)
        await second.put(digest_of(b"second %d" % i), b"2" * 100)
    assert await first.get(digest_of(b"first 0")) == b"1" * 100
    assert await second.get(digest_of(b"second 0")) == b"2" * 100
    third = FilesystemActionCache(tmp_path / "ac")
    await third.open()
    assert len(await third.digests()) == 60


async def test_memory_action_cache_is_bounded() -> None:
    cache = MemoryActionCache(100)
    for i in range(10):
        await cache.put(digest_of(bytes([i])), b"x" * 30)
    assert len(cache) == 3
    assert await cache.get(digest_of(bytes([9]))) == b"x" * 30
    with pytest.raises(ResourceExhausted):
        await cache.put(ACTION, b"y" * 101)


async def full_result(
    cas: MemoryStore | FilesystemStore,
) -> tuple[re_pb2.ActionResult, dict[str, Digest]]:
    out = await write_bytes(cas, b"output file")
    stdout = await write_bytes(cas, b"stdout text")
    in_tree = await write_bytes(cas, b"file in a tree")
    in_child = await write_bytes(cas, b"file in a child")
    tree = re_pb2.Tree(
        root=re_pb2.Directory(files=[re_pb2.FileNode(name="a", digest=in_tree.to_proto())]),
        children=[re_pb2.Directory(files=[re_pb2.FileNode(name="b", digest=in_child.to_proto())])],
    )
    tree_digest = await write_message(cas, tree)
    result = re_pb2.ActionResult(
        output_files=[re_pb2.OutputFile(path="out", digest=out.to_proto())],
        output_directories=[re_pb2.OutputDirectory(path="d", tree_digest=tree_digest.to_proto())],
        stdout_digest=stdout.to_proto(),
        exit_code=0,
        execution_metadata=re_pb2.ExecutedActionMetadata(worker="w"),
    )
    return result, {
        "out": out,
        "stdout": stdout,
        "in_tree": in_tree,
        "in_child": in_child,
        "tree": tree_digest,
    }


@pytest.mark.parametrize("evicted", ["out", "stdout", "in_tree", "in_child", "tree"])
async def test_incomplete_results_are_not_served(tmp_path: Path, evicted: str) -> None:
    cas = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 1 << 20)
    await cas.open()
    cache = ActionResultCache(MemoryActionCache(), cas)
    result, digests = await full_result(cas)
    assert await cache.put_result(ACTION, result) == result
    assert await cache.get_result(ACTION) == result
    # Evict one referenced blob behind the store's back, as a crash or a user might.
    gone = digests[evicted]
    for path in (tmp_path / "cas").rglob(f"{gone.hash}*"):
        path.unlink()
    cas._index.forget(gone)
    assert await cache.get_result(ACTION) is None
    with pytest.raises(MissingBlobs) as info:
        await cache.put_result(ACTION, result)
    assert info.value.subjects == (gone.subject,)


async def test_eviction_makes_a_result_incomplete() -> None:
    cas = MemoryStore(100)
    cache = ActionResultCache(MemoryActionCache(), cas)
    out = await write_bytes(cas, b"o" * 60)
    result = re_pb2.ActionResult(output_files=[re_pb2.OutputFile(path="o", digest=out.to_proto())])
    await cache.put_result(ACTION, result)
    await write_bytes(cas, b"p" * 60)  # evicts the output
    assert await cache.get_result(ACTION) is None


async def test_put_result_names_every_missing_blob() -> None:
    cas = MemoryStore(1 << 20)
    cache = ActionResultCache(MemoryActionCache(), cas)
    a, b = digest_of(b"a"), digest_of(b"b")
    result = re_pb2.ActionResult(
        output_files=[re_pb2.OutputFile(path="a", digest=a.to_proto())],
        stderr_digest=b.to_proto(),
    )
    with pytest.raises(MissingBlobs) as info:
        await cache.put_result(ACTION, result)
    assert set(info.value.subjects) == {a.subject, b.subject}
    assert info.value.code == 9
    assert await cache.get_result(ACTION) is None


async def test_malformed_results() -> None:
    cas = MemoryStore(1 << 20)
    ac = MemoryActionCache()
    cache = ActionResultCache(ac, cas)
    bad = re_pb2.ActionResult(
        output_files=[
            re_pb2.OutputFile(path="a", digest=re_pb2.Digest(hash="nothex", size_bytes=1))
        ]
    )
    with pytest.raises(InvalidArgument, match=r"output_files\[0\].digest"):
        await cache.put_result(ACTION, bad)
    await ac.put(ACTION, b"\xff\xff not a proto")
    assert await cache.get_result(ACTION) is None
    empty_stdout = re_pb2.ActionResult(stdout_digest=digest_of(b"").to_proto(), exit_code=3)
    stored = await cache.put_result(ACTION, empty_stdout)
    # A result without execution_metadata is stored with an empty one (Buck2 needs it).
    assert stored.HasField("execution_metadata")
    stored.ClearField("execution_metadata")
    assert stored == empty_stdout
    assert await cache.get_result(ACTION) == await cache.put_result(ACTION, empty_stdout)
