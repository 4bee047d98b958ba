from __future__ import annotations

import os
from pathlib import Path

from lre.digest import digest_of
from lre.worker.inputs._input_guard import LinkedInputs, Snapshot, altered_inputs


def linked(path: Path) -> LinkedInputs:
    return {(digest_of(path.read_bytes()), False): (str(path), Snapshot.of(str(path)))}


def test_untouched_input_is_not_altered(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"data")
    f.chmod(0o444)
    os.link(f, tmp_path / "second-link")  # a link elsewhere changes only ctime
    assert altered_inputs(linked(f)) == []


def test_written_or_chmodded_input_is_altered(tmp_path: Path) -> None:
    for change in ("write", "chmod"):
        f = tmp_path / change
        f.write_bytes(b"data")
        f.chmod(0o444)
        os.utime(f, ns=(10**18, 10**18))  # as if stored well before the action ran
        before = linked(f)
        f.chmod(0o644)
        if change == "write":
            f.write_bytes(b"EVIL")
            f.chmod(0o444)
        assert altered_inputs(before) == list(before)


def test_replaced_or_vanished_path_is_not_judged(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"data")
    before = linked(f)
    replacement = tmp_path / "new"
    replacement.write_bytes(b"other")
    os.replace(replacement, f)
    assert altered_inputs(before) == []
    f.unlink()
    assert altered_inputs(before) == []


def test_the_store_recording_a_use_is_not_an_alteration(tmp_path: Path) -> None:
    """The filesystem CAS saves uses as mtimes (``touch_all``); a batch of
    them landing while an action runs must not withdraw its inputs (found by
    bench_capacity: Buck2-shaped builds then failed on missing blobs)."""
    f = tmp_path / "f"
    f.write_bytes(b"data")
    f.chmod(0o444)
    os.utime(f, ns=(10**18, 10**18))
    before = linked(f)
    os.utime(f)  # what the store does for a used blob
    assert altered_inputs(before) == []


def test_same_size_write_is_altered_even_when_only_the_time_shows_it(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"data")
    f.chmod(0o444)
    os.utime(f, ns=(10**18, 10**18))
    before = linked(f)
    f.chmod(0o644)
    f.write_bytes(b"EVIL")
    f.chmod(0o444)
    assert altered_inputs(before) == list(before)


async def test_a_cas_write_touching_used_blobs_leaves_linked_inputs_alone(
    tmp_path: Path,
) -> None:
    """The whole path: a blob linked into an action, then enough uses of
    other blobs and one more write that the store saves its access times."""
    from lre.cas import FilesystemStore, read_bytes
    from lre.cas._blob_io import write_bytes

    store = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 1 << 30)
    await store.open()
    digest = await write_bytes(store, b"an input header\n")
    path = tmp_path / "cas" / digest.hash[:2] / f"{digest.hash}-{digest.size_bytes}"
    os.utime(path, ns=(10**18, 10**18))
    before = {(digest, False): (str(path), Snapshot.of(str(path)))}
    others = [await write_bytes(store, b"blob %d" % i) for i in range(4200)]
    await read_bytes(store, digest)
    for other in others:
        await read_bytes(store, other)
    await write_bytes(store, b"one more")
    await store.close()
    assert Snapshot.of(str(path)).mtime_ns != 10**18  # the store did touch it
    assert altered_inputs(before) == []
