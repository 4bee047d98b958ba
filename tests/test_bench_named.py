"""bench/run_all.sh and docs/performance.md name only scripts that exist, and
every benchmark script in bench/ is named by one of them (nothing is left over
that no figure depends on)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


def _run_all_listing() -> str:
    listing = subprocess.run(
        ["bash", str(BENCH / "run_all.sh"), "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return listing.stdout


def _scripts_named(text: str) -> set[str]:
    return set(re.findall(r"bench/([\w/]+\.py)", text))


def test_run_all_lists_only_scripts_that_exist() -> None:
    named = _scripts_named(_run_all_listing() + (BENCH / "run_all.sh").read_text())
    assert named, "run_all.sh --help listed no script"
    missing = sorted(name for name in named if not (BENCH / name).is_file())
    assert missing == [], f"bench/run_all.sh runs scripts that are gone: {missing}"


def test_run_all_refuses_a_name_it_does_not_know() -> None:
    refused = subprocess.run(
        ["bash", str(BENCH / "run_all.sh"), "no-such-benchmark"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode == 2
    assert "no benchmark named no-such-benchmark" in refused.stderr


def test_performance_doc_names_only_scripts_that_exist() -> None:
    named = _scripts_named((ROOT / "docs" / "performance.md").read_text())
    missing = sorted(name for name in named if not (BENCH / name).is_file())
    assert missing == [], f"docs/performance.md names scripts that are gone: {missing}"


def test_every_benchmark_script_is_named() -> None:
    """A top-level script that neither run_all.sh nor performance.md names, and
    that no other script imports, measures nothing anyone reads: it goes."""
    text = _run_all_listing() + (ROOT / "docs" / "performance.md").read_text()
    named = _scripts_named(text)
    sources = "\n".join(p.read_text() for p in BENCH.glob("*.py"))
    unnamed = sorted(
        path.name
        for path in BENCH.glob("*.py")
        if path.name not in named
        and not path.name.startswith("_")
        and not re.search(rf"^from {path.stem} import|^import {path.stem}\b", sources, re.M)
    )
    assert unnamed == [], f"bench scripts nothing names: {unnamed}"
