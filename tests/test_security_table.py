"""bench/security_table.py turns attack-test results into docs/security.md's table."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[1]


def _table() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "security_table", ROOT / "bench" / "security_table.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["security_table"] = module
    spec.loader.exec_module(module)
    return module


def test_outcomes_become_cells_and_the_doc_section_is_replaced(tmp_path: Path) -> None:
    table = _table()
    results = tmp_path / "r.jsonl"
    rows = [
        ("guardian", "pidns", "root", "held"),
        ("guardian", "portable", "root", "held"),
        ("guardian", "portable", "root", "broken"),
        ("guardian", "userns", "nobody", "skipped"),
        ("listeners", "pidns", "root", "held"),
        ("listeners", "portable", "root", "missing"),
        ("listeners", "portable", "root", "held"),
    ]
    lines = [{"attack": a, "backend": b, "identity": i, "outcome": o} for a, b, i, o in rows]
    # an action user of its own makes a column of its own, after the default
    lines.append(
        {
            "attack": "guardian",
            "backend": "pidns",
            "identity": "root",
            "action_user": "unprivileged",
            "outcome": "held",
        }
    )
    results.write_text("".join(json.dumps(line) + "\n" for line in lines))
    doc = tmp_path / "security.md"
    doc.write_text(f"before\n{table.BEGIN}\nold table\n{table.END}\nafter\n")
    assert table.main([str(results), "--write", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "old table" not in text
    assert (
        "| attack class | pidns as root, action_user root | pidns as root, action_user "
        "unprivileged | userns as nobody, action_user root | portable as root, action_user root |"
    ) in text
    assert "| guardian | held | held | skipped | **BROKEN** |" in text
    assert "| listeners | held |  |  | not held |" in text


def test_a_doc_without_markers_is_refused(tmp_path: Path) -> None:
    table = _table()
    results = tmp_path / "r.jsonl"
    results.write_text('{"attack": "a", "backend": "-", "identity": "root", "outcome": "held"}\n')
    doc = tmp_path / "security.md"
    doc.write_text("no markers\n")
    assert table.main([str(results), "--write", str(doc)]) == 1
    assert doc.read_text() == "no markers\n"


@pytest.mark.parametrize("name", ["security.md"])
def test_the_committed_doc_has_the_markers(name: str) -> None:
    text = (ROOT / "docs" / name).read_text()
    table = _table()
    assert table.BEGIN in text and table.END in text
