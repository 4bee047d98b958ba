"""Where the CPU and the time of one Bazel build go, read around the build.

``Probe.snapshot()`` before and after a build; ``Probe.split(before, after)``
gives the differences:

- ``busy``: CPU-seconds all cores spent not idle (/proc/stat);
- ``jvm`` and ``jvm_children``: the Bazel server JVM's own CPU and that of
  the processes it reaped (its sandboxed actions in a local build);
- ``lre`` and ``lre_children``: lre's own CPU (all threads) and that of the
  actions it reaped;
- ``other``: what is left of ``busy`` (the Bazel client, other processes);
- from lre's ``/metrics``: the calls of each RPC and their summed duration,
  ladder kills and retries;
- from the ``ExecutedActionMetadata`` of the action results lre wrote during
  the build (the records appended to its action-cache log, read with lre's
  own ``scan``): each action's run time. If the log was compacted (replaced)
  during the build, no results are read for it.

``bazel_server(output_root)`` finds the Bazel server JVM a build runs in.

Failures: ``Probe`` raises ``RuntimeError`` when a process it watches is
gone or lre's status listener does not answer.
"""

from __future__ import annotations

import os
import re
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil
from google.protobuf.timestamp_pb2 import Timestamp

# The log's reader is private to lre.cas; the bench reads the file lre wrote.
from lre.cas.action_cache._log import scan
from lre.proto import re_pb2

_TICK = os.sysconf("SC_CLK_TCK")
_RPC_SUM = re.compile(r'^lre_rpc_duration_seconds_(sum|count)\{method="([^"]+)"\} (\S+)$', re.M)
_COUNTER = re.compile(r"^(lre_ladder_kills_total|lre_retries_total) (\S+)$", re.M)


def _seconds(stamp: Timestamp) -> float:
    return float(stamp.ToNanoseconds()) / 1e9


def busy_seconds() -> float:
    """CPU time all cores spent not idle (nor waiting for I/O) since boot."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / _TICK


def own_cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def children_cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.children_user + times.children_system


def bazel_server(output_root: Path) -> psutil.Process:
    """The Bazel server JVM whose command line names ``output_root``."""
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if any(str(output_root) in part for part in cmdline) and any(
            "A-server.jar" in part or part.startswith("--output_user_root") for part in cmdline
        ):
            return process
    raise RuntimeError(f"no Bazel server found for {output_root}")


@dataclass(frozen=True)
class Snapshot:
    at: float
    busy: float
    jvm: float
    jvm_children: float
    lre: float
    lre_children: float
    rpc: dict[str, tuple[int, float]]  # method -> (calls, summed seconds)
    counters: dict[str, float]
    log_position: tuple[int, int]  # (inode, size) of the action-cache log


@dataclass(frozen=True)
class Split:
    wall: float
    busy: float
    jvm: float
    jvm_children: float
    lre: float
    lre_children: float
    rpc: dict[str, tuple[int, float]]
    ladder_kills: int
    retries: int
    #: Each action's run time (seconds), from the results lre wrote.
    action_runs: list[float]

    @property
    def other(self) -> float:
        return self.busy - self.jvm - self.jvm_children - self.lre - self.lre_children

    @property
    def executes(self) -> int:
        return self.rpc.get("Execution/Execute", (0, 0.0))[0]

    def lre_ms_per_action(self) -> float | None:
        return 1000 * self.lre / self.executes if self.executes else None


class Probe:
    """Reads CPU counters of one Bazel server and one lre, and lre's metrics."""

    def __init__(self, jvm_pid: int, lre_pid: int, status_address: str, ac_log: Path) -> None:
        self.jvm = psutil.Process(jvm_pid)
        self.lre = psutil.Process(lre_pid)
        self.metrics_url = f"http://{status_address}/metrics"
        self.ac_log = ac_log
        if not ac_log.is_file():
            raise RuntimeError(f"lre's action-cache log {ac_log} does not exist")

    def _metrics(self) -> tuple[dict[str, tuple[int, float]], dict[str, float]]:
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
                text = response.read().decode()
        except OSError as error:
            raise RuntimeError(f"lre's {self.metrics_url} did not answer: {error}") from error
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for kind, method, value in _RPC_SUM.findall(text):
            if kind == "sum":
                sums[method] = float(value)
            else:
                counts[method] = int(float(value))
        rpc = {m: (counts.get(m, 0), sums.get(m, 0.0)) for m in counts}
        counters = {name: float(value) for name, value in _COUNTER.findall(text)}
        return rpc, counters

    def snapshot(self, *, before: bool) -> Snapshot:
        """Counters now. ``before``: read lre's metrics first (so that serving
        them falls outside the build's window), else last."""
        if before:
            rpc, counters = self._metrics()
        snap = Snapshot(
            at=time.monotonic(),
            busy=busy_seconds(),
            jvm=own_cpu(self.jvm),
            jvm_children=children_cpu(self.jvm),
            lre=own_cpu(self.lre),
            lre_children=children_cpu(self.lre),
            rpc={},
            counters={},
            log_position=self._log_position(),
        )
        if not before:
            rpc, counters = self._metrics()
        snap.rpc.update(rpc)
        snap.counters.update(counters)
        return snap

    def split(self, before: Snapshot, after: Snapshot) -> Split:
        rpc = {}
        for method, (calls, seconds) in after.rpc.items():
            calls0, seconds0 = before.rpc.get(method, (0, 0.0))
            if calls > calls0:
                rpc[method] = (calls - calls0, seconds - seconds0)
        return Split(
            wall=after.at - before.at,
            busy=after.busy - before.busy,
            jvm=after.jvm - before.jvm,
            jvm_children=after.jvm_children - before.jvm_children,
            lre=after.lre - before.lre,
            lre_children=after.lre_children - before.lre_children,
            rpc=rpc,
            ladder_kills=int(
                after.counters.get("lre_ladder_kills_total", 0)
                - before.counters.get("lre_ladder_kills_total", 0)
            ),
            retries=int(
                after.counters.get("lre_retries_total", 0)
                - before.counters.get("lre_retries_total", 0)
            ),
            action_runs=self._action_runs(before.log_position, after.log_position),
        )

    def _log_position(self) -> tuple[int, int]:
        stat = self.ac_log.stat()
        return stat.st_ino, stat.st_size

    def _action_runs(self, start: tuple[int, int], end: tuple[int, int]) -> list[float]:
        """Run times of the action results appended to the log between two positions."""
        if start[0] != end[0] or end[1] < start[1]:
            return []  # compacted meanwhile: offsets no longer comparable
        fd = os.open(self.ac_log, os.O_RDONLY | os.O_CLOEXEC)
        try:
            slots = [slot for slot in scan(fd).index.values() if slot[0] >= start[1]]
            values = [os.pread(fd, length, offset) for offset, length, _ in slots]
        finally:
            os.close(fd)
        runs = []
        for value in values:
            m = re_pb2.ActionResult.FromString(value).execution_metadata
            runs.append(
                _seconds(m.execution_completed_timestamp) - _seconds(m.execution_start_timestamp)
            )
        return runs
