"""``lre trace``: the Chrome trace-event format, checked field by field per event type."""

from __future__ import annotations

import itertools
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from lre.snapshot import HistoryFile
from tests._support.history import (
    CANCELLED_BUILD,
    KILLED_BUILD,
    action,
    write_history,
    write_killed_and_cancelled,
)
from tests.cli._lre import run_lre

#: Fields every event of a phase type must have (the Trace Event Format document).
REQUIRED: dict[str, set[str]] = {
    "X": {"name", "cat", "ph", "ts", "dur", "pid", "tid"},
    "B": {"name", "ph", "ts", "pid", "tid"},
    "E": {"ph", "ts", "pid", "tid"},
    "i": {"name", "ph", "ts", "pid", "tid", "s"},
    "C": {"name", "ph", "ts", "pid", "args"},
    "b": {"name", "cat", "ph", "ts", "pid", "id"},
    "e": {"name", "cat", "ph", "ts", "pid", "id"},
    "M": {"name", "ph", "pid", "args"},
}


def check_trace_format(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Assert ``document`` is a valid JSON-object trace; return its events."""
    assert isinstance(document["traceEvents"], list)
    assert document.get("displayTimeUnit", "ms") in ("ms", "ns")
    events: list[dict[str, Any]] = document["traceEvents"]
    for event in events:
        ph = event["ph"]
        assert ph in REQUIRED, event
        missing = REQUIRED[ph] - set(event)
        assert not missing, (missing, event)
        assert isinstance(event["pid"], int)
        if "tid" in event:
            assert isinstance(event["tid"], int)
        if "ts" in event:
            assert isinstance(event["ts"], int | float) and event["ts"] >= 0
        if ph == "X":
            assert isinstance(event["dur"], int | float) and event["dur"] >= 0
        if ph == "i":
            assert event["s"] in ("g", "p", "t")
        if ph == "C":
            assert event["args"] and all(isinstance(v, int | float) for v in event["args"].values())
        if ph == "M":
            assert event["name"] in ("process_name", "thread_name", "thread_sort_index")
        if "args" in event:
            assert isinstance(event["args"], dict)
    # async begin/end pairs match by (cat, id)
    opened: dict[tuple[str, Any], int] = defaultdict(int)
    for event in events:
        if event["ph"] in ("b", "e"):
            opened[(event["cat"], event["id"])] += 1 if event["ph"] == "b" else -1
    assert all(n == 0 for n in opened.values())
    return events


def test_trace_has_a_track_per_slot_an_event_per_action_and_counters(tmp_path: Path) -> None:
    write_history(tmp_path / "state")
    env = {**os.environ, "LRE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}
    out = tmp_path / "trace.json"
    done = run_lre("trace", "last", "-o", str(out), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    events = check_trace_format(json.loads(out.read_text()))
    actions = [e for e in events if e["ph"] == "X" and e["cat"] != "phase"]
    assert sorted(e["name"] for e in actions) == [f"//pkg:t{n}" for n in range(1, 7)]
    slots = {e["tid"] for e in actions}
    assert len(slots) == 2  # two ran at a time
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {names[tid] for tid in slots} == {"slot 1", "slot 2"}
    for tid in slots:  # one slot never runs two actions at once
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in actions if e["tid"] == tid)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    phases = [e for e in events if e.get("cat") == "phase"]
    assert {e["name"] for e in phases} == {"staging", "running", "storing"}
    for phase in phases:  # nested inside its action on the same track
        parent = next(a for a in actions if a["name"] == phase["args"]["target"])
        assert parent["tid"] == phase["tid"]
        assert (
            parent["ts"]
            <= phase["ts"]
            <= phase["ts"] + phase["dur"]
            <= parent["ts"] + parent["dur"] + 0.2
        )
    queued = [e for e in events if e.get("cat") == "queued"]
    assert len(queued) == 12
    assert any(e.get("cat") == "kill" and "//pkg:t3" in e["name"] for e in events)
    kills = [e for e in events if e.get("cat") == "kill" and e["s"] == "g"]
    assert [round(e["ts"]) for e in kills] == [1_500_000, 1_800_000]  # when they happened
    assert {e["name"] for e in events if e["ph"] == "C"} == {"CPU", "Memory (MiB)"}
    assert {e["cat"] for e in events if e["tid"] == 1001 and e["ph"] == "i"} == {
        "lookup_hit",
        "execute_hit",
    }


def test_no_event_starts_before_time_zero_when_stamps_round_differently(tmp_path: Path) -> None:
    """The file keeps ``submitted_at`` to 0.1 ms but the phase stamps to 1 us,
    so a real build's first queued stamp can lie up to 50 us before the
    build's rounded start (seen with Bazel 4.2.3: ``ts: -49.1``). Time zero is
    the earliest moment any record names, and phases nest exactly in their
    action (same rounding on both ends)."""
    t0 = 1_800_000_000.0
    records = [action(n, t0 + 0.00006 + n * 0.0000137, slot_seconds=0.3333337) for n in range(4)]
    history = HistoryFile(tmp_path / "state", 1 << 20)
    history.append([json.dumps(r.to_json()) for r in records])
    history.close()
    env = {**os.environ, "LRE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}
    out = tmp_path / "trace.json"
    done = run_lre("trace", "last", "-o", str(out), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    events = check_trace_format(json.loads(out.read_text()))
    actions = [e for e in events if e["ph"] == "X" and e["cat"] != "phase"]
    for phase in (e for e in events if e.get("cat") == "phase"):
        parent = next(a for a in actions if a["name"] == phase["args"]["target"])
        assert parent["ts"] <= phase["ts"]
        assert phase["ts"] + phase["dur"] <= parent["ts"] + parent["dur"]


def test_a_killed_action_keeps_its_slice_and_a_cancelled_one_ends_with_a_mark(
    tmp_path: Path,
) -> None:
    write_killed_and_cancelled(tmp_path / "state")
    env = {**os.environ, "LRE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}
    traces = {}
    for build in (KILLED_BUILD, CANCELLED_BUILD):
        out = tmp_path / f"{build}.json"
        done = run_lre("trace", build[:8], "-o", str(out), cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        traces[build] = check_trace_format(json.loads(out.read_text()))
    killed = traces[KILLED_BUILD]
    (hog,) = [e for e in killed if e["ph"] == "X" and e["name"] == "//pkg:t2"]
    assert hog["dur"] > 0 and hog["args"]["killed_for_good"] is True
    assert hog["args"]["kill_reason"] == "over the hard ceiling" and hog["args"]["exit_code"] == 137
    running = [e for e in killed if e["name"] == "running" and e["args"]["target"] == "//pkg:t2"]
    assert len(running) == 1 and running[0]["dur"] > 0
    lines = [e for e in killed if e["ph"] == "i" and e["s"] == "g"]
    assert sorted(e["args"]["reason"] for e in lines) == [
        "host MemAvailable under the hard floor",
        "over the hard ceiling",
    ]
    cancelled = traces[CANCELLED_BUILD]
    marks = [e for e in cancelled if e["ph"] == "i" and e.get("cat") == "cancel"]
    assert sorted(e["name"] for e in marks) == ["//pkg:t5: cancelled", "//pkg:t6: cancelled"]
    slices = {e["name"]: e for e in cancelled if e["ph"] == "X" and e["cat"] != "phase"}
    for name in ("//pkg:t5", "//pkg:t6"):
        assert slices[name]["args"]["cancelled"] is True and slices[name]["dur"] > 0
