"""Memory control: freeze before kill, headroom, hard floor, ladder.

Runs a real ``lre up`` per scenario (bench/_client.py: scratch ``LRE_HOME``,
generated config, REAPI Execute over gRPC) whose actions are real Python
processes that allocate memory and do CPU work.

The action (``ALLOC``): grows to ``mb`` MB (10**6 bytes) in 10 MB steps, each
step a fresh bytes object (so every page is written), at most ``rate`` MB/s
(paced from one step to the next, so a thawed action does not catch up in a
burst), spreading ``work`` CPU-seconds of busy loop over its growth, then holds
its memory for ``hold`` seconds. Default rate
200 MB/s per action.

A monitor process (``--monitor``, separate so it does not share the client's
GIL) samples every 50 ms: the host's MemAvailable, the summed RSS of every
process under lre (not lre itself), and per action process (found by the tag
in its argv) its CPU time. Attempts per action = distinct host pids seen with
its tag; a kill = an attempt that was not the last; CPU thrown away = the
CPU last seen of those attempts (undercounts by <= 50 ms of CPU each). If
MemAvailable falls under ``--abort-below`` (800 MiB) it SIGKILLs every
process under lre, then the outside hog, and records the abort; the hog
watches MemAvailable itself too.

Scenarios:

a. an ordinary day on an idle machine, default config: two repositories with
   the same labels (//:mod_00.. in both; A 10 compiles + a link + a 700 MB
   genrule, B 20 compiles + a link), all sent at once, then an edit-rebuild in
   which module k uses 1 + 0.25 x (k mod 5) times its first size (up to 2x)
   and the links 1.5x. Target: 0 kills.
b. 40 actions of 300 MB of one kind never seen before, cold_memory 200 MiB
   (so a kill at 1.2 x the expected peak would be passed), each doing
   1 CPU-s of work, memory_budget 2 GiB as the only bound
   (max_inflight_tasks 0, cpu_count 1000). Targets: peak summed RSS <= 2 GiB,
   0 failures, no CPU-seconds thrown away by kills.
c. an outside process holds memory until MemAvailable is ``--hog-leave``
   (3.5 GiB), then 20 actions of 700 MB arrive at once; defaults but
   max_inflight_tasks 0 and cpu_count 1000 (memory the only bound). Targets:
   MemAvailable never under 1 GiB, 20 of 20 succeed.
d. memory_budget 2 GiB, ladder [1 GiB, 2 GiB] (so the hard ceiling is 2 GiB x
   1.2); one action growing to 1.5 GB must succeed, one growing to 3 GB must
   fail with RESOURCE_EXHAUSTED naming the steps.

Run: ``.venv/bin/python bench/memory_control.py``
(``--quick``: smaller sizes and counts, no hog of more than 2 GiB;
``--scenarios ab``; ``--runs 3`` prints medians and ranges).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _client import LreProcess, Monitor, ReapiClient, _walk, local_config, stop_on_sigterm

from lre.proto import REQUEST_METADATA_KEY, re_pb2

MiB = 1 << 20
GiB = 1 << 30
MB = 10**6
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
PY = sys.executable
TAG = "mc:"
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

ALLOC = """\
import sys, time
mb, rate = int(sys.argv[2]), float(sys.argv[3])
work, hold = float(sys.argv[4]), float(sys.argv[5])
step = 10
n = max(1, mb // step)
chunks = []
for i in range(n):
    t = time.monotonic()
    chunks.append(b'\\x01' * (step * 10**6))
    goal = work * (i + 1) / n
    while time.process_time() < goal:
        pass
    rest = step / rate - (time.monotonic() - t)
    if rest > 0:
        time.sleep(rest)
time.sleep(hold)
"""


def mem_available() -> int:
    with open("/proc/meminfo", "rb") as f:
        for line in f:
            if line.startswith(b"MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise ValueError("no MemAvailable in /proc/meminfo")


# --------------------------------------------------------------------- monitor and hog


def _monitor(root: int, abort_below: int, hog_pid_file: str, out: str) -> None:
    stopped = stop_on_sigterm()
    tags: dict[int, str | None] = {}
    attempts: dict[int, list[object]] = {}  # pid -> [tag, cpu_s, first_seen]
    min_avail = mem_available()
    peak_rss = samples = 0
    aborted: dict[str, float] = {}
    started = time.monotonic()
    while not stopped():
        avail = mem_available()
        min_avail = min(min_avail, avail)
        if avail < abort_below and not aborted:
            aborted = {"at_s": time.monotonic() - started, "available": avail}
            # stop the growth first (every process under lre: the actions),
            # then free the hog's memory
            for pid, _, _ in list(_walk(root)):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                os.kill(int(Path(hog_pid_file).read_text()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        rss = 0
        for pid, _, fields in _walk(root):
            rss += int(fields[21]) * PAGE
            if tags.get(pid) is None:
                # read again until tagged: a pid seen between fork and exec
                # shows its parent's argv
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                tags[pid] = (
                    argv[3].decode() if len(argv) > 3 and argv[3].startswith(TAG.encode()) else None
                )
            tag = tags[pid]
            if tag is not None:
                cpu = (int(fields[11]) + int(fields[12])) / TICK
                record = attempts.setdefault(pid, [tag, 0.0, time.monotonic() - started])
                record[1] = cpu
        peak_rss = max(peak_rss, rss)
        samples += 1
        time.sleep(0.05)
    Path(out).write_text(
        json.dumps(
            {
                "min_available": min_avail,
                "peak_rss": peak_rss,
                "samples": samples,
                "attempts": attempts,
                "aborted": aborted,
            }
        )
    )


def _hog(leave: int, cap: int, ready: str, abort_below: int) -> None:
    """Allocate (and write) memory until MemAvailable is ``leave`` or ``cap``
    bytes are held; then write ``ready`` and hold until SIGTERM, exiting at once
    if MemAvailable falls under ``abort_below``."""
    stopped = stop_on_sigterm()
    held: list[bytes] = []
    chunk = 64 * MiB
    while not stopped() and len(held) * chunk < cap and mem_available() - chunk > leave:
        held.append(b"\x02" * chunk)
    Path(ready).write_text(json.dumps({"held": len(held) * chunk, "available": mem_available()}))
    while not stopped():
        if mem_available() < abort_below:
            os._exit(3)
        time.sleep(0.05)


@contextmanager
def hog(tmp: Path, leave: int, cap: int, abort_below: int) -> Iterator[dict[str, int]]:
    """An outside process holding memory (never lre's); killed on the way out."""
    ready = tmp / "hog-ready.json"
    proc = subprocess.Popen(
        [PY, __file__, "--hog", str(leave), str(cap), str(ready), str(abort_below)]
    )
    (tmp / "hog.pid").write_text(str(proc.pid))
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the memory hog did not get ready")
            time.sleep(0.1)
        time.sleep(0.2)
        yield dict(json.loads(ready.read_text()))
    finally:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------- actions


@dataclass(frozen=True)
class Job:
    tag: str
    mb: int
    work: float
    hold: float = 0.5
    mnemonic: str = ""
    target: str = ""
    #: the ``x-lre-repository`` header ``lre link`` would make the client
    #: send ("" sends none: then lre keys history by instance name)
    repository: str = ""


@dataclass
class Outcome:
    job: Job
    code: int
    exit_code: int
    message: str
    status_message: str

    @property
    def ok(self) -> bool:
        return self.code == 0 and self.exit_code == 0


def metadata(job: Job) -> tuple[tuple[str, str | bytes], ...]:
    if not job.target:
        return ()
    meta = re_pb2.RequestMetadata(
        tool_details=re_pb2.ToolDetails(tool_name="bazel", tool_version="4.2.3"),
        action_id=job.tag,
        tool_invocation_id="memory-control",
        correlated_invocations_id="memory-control",
        action_mnemonic=job.mnemonic,
        target_id=job.target,
        configuration_id="k8-fastbuild",
    )
    headers: tuple[tuple[str, str | bytes], ...] = (
        (REQUEST_METADATA_KEY, meta.SerializeToString()),
    )
    if job.repository:
        headers += (("x-lre-repository", job.repository),)
    return headers


async def run_jobs(address: str, jobs: Sequence[Job], rate: float) -> list[Outcome]:
    client = ReapiClient(address)
    try:
        digests = []
        for job in jobs:
            argv = [PY, "-c", ALLOC, job.tag, str(job.mb), str(rate), str(job.work), str(job.hold)]
            digests.append(await client.prepare(argv, env=ENV))

        async def one(job: Job, digest: re_pb2.Digest) -> Outcome:
            r = await asyncio.wait_for(client.execute(digest, metadata(job)), 900)
            return Outcome(job, r.status.code, r.result.exit_code, r.message, r.status.message)

        return list(await asyncio.gather(*(one(j, d) for j, d in zip(jobs, digests, strict=True))))
    finally:
        await client.close()


# --------------------------------------------------------------------- one scenario


@dataclass
class Result:
    scenario: str
    figures: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def kills_and_waste(
    seen: dict[str, object], outcomes: Sequence[Outcome]
) -> tuple[int, float, float]:
    """Attempts that were not the last of a succeeded action, their CPU, and
    the CPU of the attempts that succeeded."""
    by_tag: dict[str, list[tuple[float, float]]] = {}
    for tag, cpu, first in seen["attempts"].values():  # type: ignore[attr-defined]
        by_tag.setdefault(tag, []).append((first, cpu))
    ok = {o.job.tag for o in outcomes if o.ok}
    kills, waste, useful = 0, 0.0, 0.0
    for tag, runs in by_tag.items():
        runs.sort()
        lost = runs[:-1] if tag in ok else runs
        kills += len(runs) - 1 if tag in ok else len(runs)
        waste += sum(cpu for _, cpu in lost)
        useful += runs[-1][1] if tag in ok else 0.0
    return kills, waste, useful


def run_scenario(
    tmp: Path,
    name: str,
    worker: dict[str, object],
    rounds: Sequence[Sequence[Job]],
    args: argparse.Namespace,
    hog_bytes: int = 0,
) -> tuple[Result, list[Outcome], dict[str, object]]:
    home = tmp / name
    result = Result(name)
    outcomes: list[Outcome] = []
    with LreProcess(local_config(home, worker), home) as lre:
        abort = args.abort_below
        monitor = Monitor(
            "--monitor",
            str(lre.proc.pid),
            str(abort),
            str(tmp / "hog.pid"),
            out=home / "monitor.json",
            script=__file__,
        )
        try:
            started = time.monotonic()
            if hog_bytes:
                with hog(tmp, args.hog_leave, hog_bytes, abort) as held:
                    result.figures["hog_GiB"] = held["held"] / GiB
                    result.figures["avail_before_GiB"] = held["available"] / GiB
                    started = time.monotonic()
                    for jobs in rounds:
                        outcomes += asyncio.run(run_jobs(lre.address, jobs, args.rate))
            else:
                for jobs in rounds:
                    outcomes += asyncio.run(run_jobs(lre.address, jobs, args.rate))
            wall = time.monotonic() - started
        finally:
            seen = monitor.stop()
        log = lre.log_path
    text = log.read_text(errors="replace")
    kills, waste, useful = kills_and_waste(seen, outcomes)
    result.figures.update(
        actions=len(outcomes),
        succeeded=sum(o.ok for o in outcomes),
        kills=kills,
        cpu_thrown_away_s=waste,
        cpu_useful_s=useful,
        wall_s=wall,
        peak_rss_MiB=seen["peak_rss"] / MiB,  # type: ignore[operator]
        min_avail_MiB=seen["min_available"] / MiB,  # type: ignore[operator]
        froze=text.count("memory control: froze"),
        aborted=1 if seen["aborted"] else 0,
    )
    if seen["aborted"]:
        result.notes.append(f"ABORTED (hog killed): {seen['aborted']}")
    return result, outcomes, seen


# --------------------------------------------------------------------- the four scenarios


def scenario_a(tmp: Path, args: argparse.Namespace) -> Result:
    q = args.quick
    n_a, n_b = (4, 6) if q else (10, 20)
    big = 300 if q else 700

    def build(edit: bool) -> list[Job]:
        r = "2" if edit else "1"
        jobs = []
        for repo, count, base, per in (("A", n_a, 20, 4), ("B", n_b, 30, 2)):
            for k in range(count):
                factor = 1 + 0.25 * (k % 5) if edit else 1.0
                jobs.append(
                    Job(
                        f"{TAG}a:{r}:{repo}:mod_{k:02d}",
                        int((base + per * k) * factor),
                        0.2,
                        mnemonic="CppCompile",
                        target=f"//:mod_{k:02d}",
                        repository=f"/home/dev/{repo}",
                    )
                )
            link = (60 if repo == "A" else 80) * (1.5 if edit else 1)
            jobs.append(
                Job(
                    f"{TAG}a:{r}:{repo}:app",
                    int(link),
                    0.2,
                    mnemonic="CppLink",
                    target="//:app",
                    repository=f"/home/dev/{repo}",
                )
            )
        jobs.append(
            Job(
                f"{TAG}a:{r}:A:big",
                big,
                0.5,
                mnemonic="Genrule",
                target="//:big",
                repository="/home/dev/A",
            )
        )
        return jobs

    worker: dict[str, object] = {}
    if q:
        worker = {"resources": {"cold_memory": "256MiB"}}
    result, outcomes, _ = run_scenario(tmp, "a", worker, [build(False), build(True)], args)
    result.notes += [f"{o.job.tag}: {o.message}" for o in outcomes if o.message]
    return result


def scenario_b(tmp: Path, args: argparse.Namespace) -> Result:
    n, mb, budget = (12, 150, "1GiB") if args.quick else (40, 300, "2GiB")
    cold = "100MiB" if args.quick else "200MiB"
    worker = {
        "max_inflight_tasks": 0,
        "resources": {"cpu_count": 1000, "memory_budget": budget, "cold_memory": cold},
    }
    jobs = [Job(f"{TAG}b:{i:02d}", mb, 1.0) for i in range(n)]
    result, outcomes, _ = run_scenario(tmp, "b", worker, [jobs], args)
    result.figures["budget_MiB"] = (1 << 10) if args.quick else 2048
    failed = [o for o in outcomes if not o.ok]
    result.notes += [f"failed {o.job.tag}: {o.code} {o.status_message}" for o in failed[:3]]
    return result


def scenario_c(tmp: Path, args: argparse.Namespace) -> Result:
    n, mb = (6, 300) if args.quick else (20, 700)
    cap = 2 * GiB if args.quick else 22 * GiB
    worker = {"max_inflight_tasks": 0, "resources": {"cpu_count": 1000}}
    jobs = [Job(f"{TAG}c:{i:02d}", mb, 0.5) for i in range(n)]
    result, outcomes, _ = run_scenario(tmp, "c", worker, [jobs], args, hog_bytes=cap)
    failed = [o for o in outcomes if not o.ok]
    result.notes += [f"failed {o.job.tag}: {o.code} {o.status_message}" for o in failed[:3]]
    result.notes += sorted({o.message for o in outcomes if o.message})[:3]
    return result


def scenario_d(tmp: Path, args: argparse.Namespace) -> Result:
    worker = {"resources": {"memory_budget": "2GiB", "ladder": ["1GiB", "2GiB"]}}
    fits = Job(f"{TAG}d:fits", 1500, 1.0)
    too_big = Job(f"{TAG}d:too-big", 3000, 1.0)
    result, outcomes, _ = run_scenario(tmp, "d", worker, [[fits], [too_big]], args)
    by_tag = {o.job.tag: o for o in outcomes}
    f, t = by_tag[fits.tag], by_tag[too_big.tag]
    result.figures["fits_ok"] = int(f.ok)
    result.figures["too_big_code"] = t.code
    result.figures["too_big_names_steps"] = int(t.code == 8 and "steps tried" in t.status_message)
    result.notes.append(f"1.5 GB: code {f.code} exit {f.exit_code}; message {f.message!r}")
    result.notes.append(f"3 GB: code {t.code}: {t.status_message}")
    return result


SCENARIOS = {"a": scenario_a, "b": scenario_b, "c": scenario_c, "d": scenario_d}

KEYS = {
    "a": ("succeeded", "actions", "kills", "cpu_thrown_away_s", "froze", "wall_s"),
    "b": (
        "succeeded",
        "actions",
        "kills",
        "cpu_thrown_away_s",
        "cpu_useful_s",
        "peak_rss_MiB",
        "froze",
        "wall_s",
    ),
    "c": (
        "succeeded",
        "actions",
        "min_avail_MiB",
        "kills",
        "cpu_thrown_away_s",
        "froze",
        "aborted",
        "hog_GiB",
        "avail_before_GiB",
        "wall_s",
    ),
    "d": (
        "fits_ok",
        "too_big_code",
        "too_big_names_steps",
        "kills",
        "cpu_thrown_away_s",
        "peak_rss_MiB",
        "wall_s",
    ),
}


def show(result: Result) -> None:
    figures = "  ".join(
        f"{k}={result.figures[k]:.4g}" for k in KEYS[result.scenario] if k in result.figures
    )
    print(f"[{result.scenario}] {figures}", flush=True)
    for note in result.notes:
        print(f"    {note}", flush=True)


def summary(results: Sequence[Result]) -> None:
    print("\nmedian [min-max] over runs")
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(r.scenario, []).append(r)
    for scenario, rs in sorted(groups.items()):
        parts = []
        for k in KEYS[scenario]:
            values = [r.figures[k] for r in rs if k in r.figures]
            if values:
                parts.append(
                    f"{k}={statistics.median(values):.4g} [{min(values):.4g}-{max(values):.4g}]"
                )
        print(f"[{scenario}] n={len(rs)}  " + "  ".join(parts), flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--monitor":
        _monitor(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--hog":
        _hog(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="abcd")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rate", type=float, default=200.0, help="MB/s per action (at most)")
    parser.add_argument("--hog-leave", type=float, default=3.5, help="GiB left available")
    parser.add_argument("--abort-below", type=float, default=800, help="MiB")
    parser.add_argument("--keep", type=Path, help="copy each scenario's scratch here")
    args = parser.parse_args()
    args.hog_leave = int(args.hog_leave * GiB)
    args.abort_below = int(args.abort_below * MiB)
    results = []
    print(
        f"rate {args.rate:g} MB/s per action; MemAvailable at start "
        f"{mem_available() / GiB:.1f} GiB",
        flush=True,
    )
    for _ in range(args.runs):
        for scenario in args.scenarios:
            with tempfile.TemporaryDirectory(prefix="lre-bench-mc-") as d:
                result = SCENARIOS[scenario](Path(d), args)
                if args.keep:
                    subprocess.run(["cp", "-r", d, str(args.keep)], check=True)
            show(result)
            results.append(result)
    if args.runs > 1:
        summary(results)


if __name__ == "__main__":
    main()
