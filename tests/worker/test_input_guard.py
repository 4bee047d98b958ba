from __future__ import annotations

import os
from pathlib import Path

from lre.digest import digest_of
from lre.worker._input_guard import LinkedInputs, Snapshot, altered_inputs


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
