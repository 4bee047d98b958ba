"""The parser of taskstats exit records behind the firehose's split
(bench/_taskstats.py)."""

from __future__ import annotations

import importlib.util
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
