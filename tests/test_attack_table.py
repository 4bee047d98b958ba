"""tests/_support/attack_report.py turns attack-test results into docs/security.md's table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._support import attack_report as table

ROOT = Path(__file__).parents[1]


def test_outcomes_become_cells_and_the_doc_section_is_replaced(tmp_path: Path) -> None:
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
    results = tmp_path / "r.jsonl"
    results.write_text('{"attack": "a", "backend": "-", "identity": "root", "outcome": "held"}\n')
    doc = tmp_path / "security.md"
    doc.write_text("no markers\n")
    assert table.main([str(results), "--write", str(doc)]) == 1
    assert doc.read_text() == "no markers\n"


@pytest.mark.parametrize("name", ["security.md"])
def test_the_committed_doc_has_the_markers(name: str) -> None:
    text = (ROOT / "docs" / name).read_text()
    assert table.BEGIN in text and table.END in text
