"""The parsers behind the split benches: Bazel profile steps per action
(bench/_bazel_profile.py) and taskstats exit records (bench/_taskstats.py)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import struct
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[1]


def _bench_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _x(
    name: str, ts: int, dur: int, tid: int, cat: str = "general information"
) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid, "pid": 1}


def test_steps_belong_to_the_action_on_their_thread_inside_its_span(tmp_path: Path) -> None:
    profile = _bench_module("_bazel_profile")
    events = [
        _x("Compiling src/mod_07.c", 1_000, 500_000, tid=7, cat="action processing"),
        _x("MerkleTree.build(ActionInput)", 2_000, 1_000, tid=7),
        _x("upload missing inputs", 3_000, 60_000, tid=7, cat="Remote execution upload time"),
        _x("execute remotely", 70_000, 400_000, tid=7, cat="remote action execution"),
        _x("download outputs", 480_000, 10_000, tid=7, cat="remote output download"),
        _x("download server logs", 495_000, 1_000, tid=7, cat="remote output download"),
        # another action's step at the same time on another thread: not this one's
        _x("execute remotely", 5_000, 300_000, tid=8, cat="remote action execution"),
        # a step on the same thread after the span: not this one's
        _x("execute remotely", 600_000, 9_000, tid=7, cat="remote action execution"),
        _x("Linking app", 700_000, 100_000, tid=8, cat="action processing"),
        _x("execute remotely", 710_000, 80_000, tid=8, cat="remote action execution"),
        # not a spawn an edit-rebuild runs
        _x("Writing file app-2.params", 0, 5_000, tid=7, cat="action processing"),
        {"ph": "C", "name": "cpu counters", "ts": 0, "args": {}},
    ]
    path = tmp_path / "profile.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    loaded = profile.load_events(path)
    assert all(e["ph"] == "X" for e in loaded)
    compile_, link = profile.action_phases(loaded, profile.REMOTE_STEPS)
    assert compile_.name == "Compiling src/mod_07.c"
    assert compile_.total == pytest.approx(0.5)
    assert compile_.steps["Merkle tree"] == pytest.approx(0.001)
    assert compile_.steps["upload missing inputs"] == pytest.approx(0.06)
    assert compile_.steps["execute remotely"] == pytest.approx(0.4)
    assert compile_.steps["download"] == pytest.approx(0.011)
    assert compile_.unprofiled == pytest.approx(0.5 - 0.472)
    assert link.steps["execute remotely"] == pytest.approx(0.08)
    assert link.steps["Merkle tree"] == 0.0


def test_a_file_that_is_no_trace_is_refused(tmp_path: Path) -> None:
    profile = _bench_module("_bazel_profile")
    path = tmp_path / "p.json"
    path.write_text('{"otherData": {}}')
    with pytest.raises(ValueError, match="not a Chrome trace"):
        profile.load_events(path)


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("HH", length, kind) + payload + b"\0" * (-length % 4)


def _exit_record(comm: str, pid: int, ppid: int, cpu_ns: int) -> bytes:
    stats = bytearray(336)
    struct.pack_into("H", stats, 0, 10)  # version
    struct.pack_into("Q", stats, 64, 4_000_000)  # tick-based total: must not be used
    struct.pack_into("Q", stats, 72, cpu_ns)  # sum_exec_runtime
    stats[80 : 80 + len(comm)] = comm.encode()
    struct.pack_into("II", stats, 120, 0, 0)  # uid, gid
    struct.pack_into("II", stats, 128, pid, ppid)
    inner = _attr(1, struct.pack("I", pid)) + _attr(3, bytes(stats))
    return _attr(4, inner)


def test_exit_records_give_name_pid_parent_and_scheduler_cpu() -> None:
    taskstats = _bench_module("_taskstats")
    records = _exit_record("timeout", 501, 500, 1_900_000) + _exit_record("sh", 502, 501, 70_000)
    exits = taskstats._exits(records)
    assert [(e.comm, e.pid, e.ppid) for e in exits] == [("timeout", 501, 500), ("sh", 502, 501)]
    assert exits[0].cpu_seconds == pytest.approx(0.0019)
    assert exits[1].cpu_seconds == pytest.approx(0.00007)


def test_only_tasks_below_the_root_count() -> None:
    taskstats = _bench_module("_taskstats")
    exit_ = taskstats.TaskExit
    exits = [
        exit_("timeout", 501, 500, 0.002),  # lre (500) -> timeout
        exit_("sh", 502, 501, 0.070),  # -> the command
        exit_("make", 503, 502, 0.002),
        exit_("gcc", 900, 899, 5.0),  # another build on the machine
        exit_("loop", 950, 951, 1.0),  # a parent cycle (pid reuse) is not below
        exit_("loop", 951, 950, 1.0),
    ]
    below = taskstats.descendants(exits, 500)
    assert dict(below.count) == {"timeout": 1, "sh": 1, "make": 1}
    assert below.cpu["sh"] == pytest.approx(0.070)
