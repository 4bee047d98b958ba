"""``lre history`` and ``lre builds [show]`` read the state dir with lre down."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from lre.snapshot import MEMORY_BELOW_IMAGE, MEMORY_KERNEL, MEMORY_SAMPLED, HistoryFile
from tests._support.history import INVOCATION, OTHER, action, write_history
from tests.cli._lre import run_lre


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "LRE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}


def test_history_lists_actions_with_waits_kills_and_filters(tmp_path: Path) -> None:
    write_history(tmp_path / "state")
    env = _env(tmp_path)
    shown = run_lre("history", cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    header, *rows, legend = shown.stdout.splitlines()
    assert header.split()[:4] == ["time", "repo", "target", "mnemonic"]
    assert legend.startswith("peak: s sampled")
    assert len(rows) == 9
    killed = next(r for r in rows if "//pkg:t3 " in r)
    assert "memory budget" in killed and killed.rstrip().endswith("2/0")
    as_json = json.loads(
        run_lre("history", "--json", "-t", "//pkg:t5", cwd=tmp_path, env=env).stdout
    )
    assert [r["target"] for r in as_json] == ["//pkg:t5"] and as_json[0]["exit_code"] == 1
    assert set(as_json[0]["phases_s"]) == {"queued", "staging", "running", "storing"}
    globbed = json.loads(
        run_lre("history", "--json", "-t", "//pkg:cach*", cwd=tmp_path, env=env).stdout
    )
    assert {r["source"] for r in globbed} == {"lookup_hit", "execute_hit"}


def test_builds_lists_and_shows_a_summary(tmp_path: Path) -> None:
    write_history(tmp_path / "state")
    env = _env(tmp_path)
    listed = json.loads(run_lre("builds", "--json", cwd=tmp_path, env=env).stdout)
    assert [b["invocation"] for b in listed] == [OTHER, INVOCATION]
    assert listed[0]["client"] == "buck2 2024-05-01"
    last = json.loads(run_lre("builds", "show", "last", "--json", cwd=tmp_path, env=env).stdout)
    assert last["invocation"] == INVOCATION
    assert (last["executed"], last["failed"], last["killed"]) == (6, 1, 1)
    assert last["cache_hits"] == {"execute": 1, "get_action_result": 1}
    assert last["queue_wait_s"] == {"p50": 0.1, "p95": 0.1}
    assert last["slowest"][0]["target"] == "//pkg:t6"
    by_prefix = run_lre("builds", "show", OTHER[:6], cwd=tmp_path, env=env)
    assert by_prefix.returncode == 0 and OTHER in by_prefix.stdout
    assert "slowest actions:" in by_prefix.stdout
    unknown = run_lre("builds", "show", "nope", cwd=tmp_path, env=env)
    assert unknown.returncode == 1 and "no build 'nope'" in unknown.stderr
    table = run_lre("builds", cwd=tmp_path, env=env).stdout.splitlines()
    assert table[0].split()[:5] == ["build", "repo", "started", "duration", "client"]
    assert len(table) == 3


def test_memory_figures_say_where_they_came_from(tmp_path: Path) -> None:
    """Sampled, the kernel's rusage, or below lre's own size: in the history
    table and JSON, and in ``builds show`` with its largest figure."""
    t0 = 1_800_000_000.0
    records = [
        action(1, t0, peak_rss_bytes=300 << 20, memory_source=MEMORY_SAMPLED),
        action(2, t0 + 1, peak_rss_bytes=200 << 20, memory_source=MEMORY_KERNEL),
        action(3, t0 + 2, peak_rss_bytes=0, memory_source=MEMORY_BELOW_IMAGE),
    ]
    history = HistoryFile(tmp_path / "state", 1 << 20)
    history.append([json.dumps(r.to_json()) for r in records])
    history.close()
    env = _env(tmp_path)
    shown = run_lre("history", cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    rows = {r.split()[2]: r for r in shown.stdout.splitlines()[1:-1]}
    assert "300 MiB s" in rows["//pkg:t1"]
    assert "200 MiB k" in rows["//pkg:t2"]
    assert "<lre k" in rows["//pkg:t3"]
    as_json = json.loads(run_lre("history", "--json", cwd=tmp_path, env=env).stdout)
    assert [r["memory_source"] for r in as_json] == [
        MEMORY_SAMPLED,
        MEMORY_KERNEL,
        MEMORY_BELOW_IMAGE,
    ]
    show = run_lre("builds", "show", cwd=tmp_path, env=env).stdout
    assert "peak memory of one action 300 MiB (sampled)" in show


def test_empty_history_says_so(tmp_path: Path) -> None:
    env = _env(tmp_path)
    assert "no actions recorded" in run_lre("history", cwd=tmp_path, env=env).stdout
    shown = run_lre("builds", "show", cwd=tmp_path, env=env)
    assert shown.returncode == 1 and "no builds recorded" in shown.stderr


def test_history_reads_bazel_target_patterns(tmp_path: Path) -> None:
    write_history(tmp_path / "state")
    env = _env(tmp_path)
    every = json.loads(run_lre("history", "--json", cwd=tmp_path, env=env).stdout)
    in_pkg = [r for r in every if r["target"].startswith("//pkg:")]
    assert in_pkg
    for pattern in ("//pkg/...", "//...", "//pkg:all", "//pkg:*"):
        shown = run_lre("history", "--json", "-t", pattern, cwd=tmp_path, env=env)
        assert shown.returncode == 0, shown.stderr
        assert len(json.loads(shown.stdout)) == len(in_pkg), pattern
    other = run_lre("history", "-t", "//app/...", cwd=tmp_path, env=env)
    assert other.returncode == 0, other.stderr
    assert f"no action of //app/... among the {len(every)} recorded" in other.stdout


def test_slowest_actions_are_the_longest_running_not_the_longest_queued(tmp_path: Path) -> None:
    t0 = 1_800_000_000.0
    waited = action(1, t0, slot_seconds=0.5)
    stamps = dict(waited.stamps)
    stamps["queued"] = t0 - 30.0  # 30 s in the queue, half a second running
    waited = dataclasses.replace(waited, stamps=stamps, submitted_at=t0 - 30.0)
    long_running = action(2, t0, slot_seconds=4.0)
    history = HistoryFile(tmp_path / "state", 1 << 20)
    history.append([json.dumps(r.to_json()) for r in (waited, long_running)])
    history.close()
    shown = run_lre("builds", "show", "last", "--json", cwd=tmp_path, env=_env(tmp_path))
    assert shown.returncode == 0, shown.stderr
    slowest = [r["target"] for r in json.loads(shown.stdout)["slowest"]]
    assert slowest == ["//pkg:t2", "//pkg:t1"], slowest
