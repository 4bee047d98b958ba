"""The history ring: bounded on disk, torn-tail tolerant, readable with lre down."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lre.snapshot import (
    ActionRecord,
    BuildSpan,
    HistoryFile,
    HistoryLine,
    HostSample,
    ServerStart,
    Source,
    read_history,
)
from lre.snapshot._history_file import CURRENT_NAME


def _record(n: int) -> ActionRecord:
    return ActionRecord(
        at=1000.0 + n,
        source=Source.EXECUTED,
        invocation="inv-1",
        target=f"//pkg:t{n}",
        mnemonic="CppCompile",
        exit_code=0,
        submitted_at=999.0 + n,
        waited_for=("cpu",),
        peak_rss_bytes=1 << 20,
        stamps={"queued": 999.0 + n, "worker_start": 999.5 + n},
        repository="app-1",
    )


def _line(record: ActionRecord) -> str:
    return json.dumps(record.to_json(), separators=(",", ":"))


def test_records_round_trip_through_the_file(tmp_path: Path) -> None:
    history = HistoryFile(tmp_path / "state", 1 << 20)
    sample = HostSample(5.0, 12.5, 1 << 30, 4 << 30, 2000, 1 << 29, 3)
    span = BuildSpan(6.0, "inv-1", 1.0, 5.5, repository="app-1", tool="bazel 4.2.3", open_calls=2)
    start = ServerStart(7.0, pid=42)
    lines: list[HistoryLine] = [_record(1), sample, span, start]
    history.append([json.dumps(line.to_json()) for line in lines])
    history.close()
    back = list(read_history(tmp_path / "state"))
    assert back == lines
    assert back[0].queue_seconds == 0.5  # type: ignore[union-attr]


def test_size_stays_bounded_and_the_newest_survive(tmp_path: Path) -> None:
    limit = 64 << 10
    history = HistoryFile(tmp_path, limit)
    for n in range(5000):
        history.append([_line(_record(n))])
        assert history.size_on_disk() <= limit + 1024
    history.close()
    records = [r for r in read_history(tmp_path) if isinstance(r, ActionRecord)]
    assert records[-1].target == "//pkg:t4999"
    assert 50 < len(records) < 5000
    targets = [r.target for r in records]
    assert targets == sorted(targets, key=lambda t: int(t.rsplit("t", 1)[1]))  # oldest first


def test_a_torn_tail_is_cut_and_damaged_lines_are_skipped(tmp_path: Path) -> None:
    history = HistoryFile(tmp_path, 1 << 20)
    history.append([_line(_record(1)), _line(_record(2))])
    history.close()
    path = tmp_path / CURRENT_NAME
    data = path.read_bytes()
    # a crash in the middle of the third line, and garbage in the middle of the file
    path.write_bytes(data + b'{"k":"a","at":3,"src":"exec')
    assert [r.target for r in read_history(tmp_path)] == ["//pkg:t1", "//pkg:t2"]  # type: ignore[union-attr]
    reopened = HistoryFile(tmp_path, 1 << 20)
    reopened.append([_line(_record(4))])  # starts on a line of its own
    reopened.close()
    with path.open("ab") as handle:
        handle.write(b"\xff\xfe not json\n" + b'{"k":"a"}\n' + b'{"k":"zz","at":1}\n')
    reopened = HistoryFile(tmp_path, 1 << 20)
    reopened.append([_line(_record(5))])
    reopened.close()
    assert [r.target for r in read_history(tmp_path)] == [  # type: ignore[union-attr]
        "//pkg:t1",
        "//pkg:t2",
        "//pkg:t4",
        "//pkg:t5",
    ]


def test_a_full_disk_raises_to_the_caller(tmp_path: Path) -> None:
    os.symlink("/dev/full", tmp_path / CURRENT_NAME)
    history = HistoryFile(tmp_path, 1 << 20)
    with pytest.raises(OSError):
        history.append([_line(_record(1))])
    history.close()


def test_missing_history_reads_as_empty(tmp_path: Path) -> None:
    assert list(read_history(tmp_path / "nowhere")) == []
