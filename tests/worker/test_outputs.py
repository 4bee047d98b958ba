"""Collecting outputs: names, tree limits and the output budget, all judged
before a byte is read (issue 26)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lre.errors import InvalidArgument, ResourceExhausted
from lre.proto import re_pb2
from lre.worker import _outputs
from lre.worker._limits import ActionLimits
from lre.worker._output_checks import OutputBudget
from lre.worker._outputs import OutputRequest, log_file, scan_outputs


def _scan(root: Path, names: list[str], limits: ActionLimits) -> _outputs.FoundOutputs:
    requests = [OutputRequest(name, name, "path") for name in names]
    return scan_outputs(root, requests, allow_escaping_symlinks=False, budget=OutputBudget(limits))


def test_an_output_directory_over_the_entry_limit_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    for index in range(30):
        (tmp_path / "out" / f"f{index}").write_bytes(b"x")
    with pytest.raises(InvalidArgument, match=r"limits\.max_tree_entries \(20\)"):
        _scan(tmp_path, ["out"], ActionLimits(max_tree_entries=20))


def test_an_output_directory_over_the_directory_limit_is_refused(tmp_path: Path) -> None:
    for index in range(10):
        (tmp_path / "out" / f"d{index}").mkdir(parents=True)
    with pytest.raises(InvalidArgument, match=r"limits\.max_tree_directories \(5\)"):
        _scan(tmp_path, ["out"], ActionLimits(max_tree_directories=5))


def test_empty_directories_are_kept_in_the_tree(tmp_path: Path) -> None:
    (tmp_path / "out" / "a" / "empty").mkdir(parents=True)
    (tmp_path / "out" / "b").mkdir()
    (tmp_path / "out" / "a" / "f").write_bytes(b"f")
    found = _scan(tmp_path, ["out"], ActionLimits())
    ((_, tree_digest, _),) = found.directories
    tree = re_pb2.Tree.FromString(found.blobs[tree_digest])
    assert [d.name for d in tree.root.directories] == ["a", "b"]
    # "a" and the two empty directories, which are one message (deduplicated).
    assert sorted(len(c.directories) for c in tree.children) == [0, 1]


def test_a_sparse_giant_is_refused_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_reading(fd: int, expected: int | None = None) -> object:
        raise AssertionError("the file was read")

    with open(tmp_path / "big", "wb") as f:
        f.truncate(1 << 40)
    monkeypatch.setattr(_outputs, "hash_fd", no_reading)
    with pytest.raises(ResourceExhausted) as caught:
        _scan(tmp_path, ["big"], ActionLimits(max_output_bytes=1 << 30))
    assert "'big' is 1099511627776 bytes (0 allocated)" in caught.value.message
    assert "limits.max_output_bytes" in caught.value.message


def test_outputs_stdout_and_stderr_share_one_budget(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a" * 6000)
    (tmp_path / "stdout").write_bytes(b"s" * 6000)
    budget = OutputBudget(ActionLimits(max_output_bytes=10_000))
    scan_outputs(
        tmp_path, [OutputRequest("a", "a", "path")], allow_escaping_symlinks=False, budget=budget
    )
    info = os.stat(tmp_path / "stdout")
    with pytest.raises(ResourceExhausted, match="'stdout' is 6000 bytes"):
        log_file(tmp_path / "stdout", (info.st_dev, info.st_ino), budget)


def test_a_non_utf8_name_deep_in_an_output_directory_is_named_escaped(tmp_path: Path) -> None:
    (tmp_path / "out" / "sub").mkdir(parents=True)
    os.mkdir(os.fsencode(tmp_path / "out" / "sub") + b"/x\xe9y")
    with pytest.raises(InvalidArgument, match=r"output 'out/sub/x\\xe9y': its name is not"):
        _scan(tmp_path, ["out"], ActionLimits())
