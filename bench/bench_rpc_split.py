"""lre's CPU per single call, split by thread, one kind of call at a time.

``bench_lre_ab.py --work rpc`` gives a same-run B/A per call but averages the
thread split over the four kinds. This starts one lre server (``--tree``: the
source tree whose ``lre`` runs, through ``PYTHONPATH``) with the bench's own
config and, for each kind of call in turn (FindMissingBlobs of 30 present
blobs, a ByteStream Read of a 1.5 KB blob, a GetActionResult miss, a
one-message ByteStream Write of a new 600-byte blob), makes ``--calls`` calls
with ``--inflight`` in flight, ``--rounds`` times, and prints the median CPU
per call of each of lre's threads (``/proc/<pid>/task/*``), and of the
kernel's part of it (``(sys)``: system calls, e.g. creating files).

``--profile DIR`` also runs the server under cProfile
(``bench/rpc_profile/sitecustomize.py``), every thread of it, and prints the
top functions of the main (Trio) thread and the gRPC thread by own time, from
the profile files written to ``DIR`` when lre stops. Profiling slows what it
measures several times over: read the profile for shares, the unprofiled run
for figures.

Raises ``RuntimeError`` when lre does not start or a call fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _client import LreProcess, ReapiClient, local_config
from _replay import BAZEL_WORKER
from bench_lre_ab import _rpc_calls, _timed

PROFILE_DIR = Path(__file__).resolve().parent / "rpc_profile"


def _cpu_by_thread(pid: int) -> dict[str, float]:
    """Seconds of CPU per thread name, threads of one name summed; the
    kernel's share of each also as ``<name> (sys)``."""
    ticks = os.sysconf("SC_CLK_TCK")
    summed: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        user, system = int(fields[11]) / ticks, int(fields[12]) / ticks
        summed[name] = summed.get(name, 0.0) + user + system
        summed[f"{name} (sys)"] = summed.get(f"{name} (sys)", 0.0) + system
    return summed


async def _measure(lre: LreProcess, args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    client = ReapiClient(lre.address)
    try:
        present = await client.upload([os.urandom(1500) for _ in range(30)])
        calls = _rpc_calls(client, present)
        if args.kinds:
            calls = {k: v for k, v in calls.items() if k in args.kinds}
        for fn in calls.values():
            await _timed(200, args.inflight, fn)
        found: dict[str, dict[str, list[float]]] = {}
        pid = lre.proc.pid
        for _ in range(args.rounds):
            for kind, fn in calls.items():
                before = _cpu_by_thread(pid)
                await _timed(args.calls, args.inflight, fn)
                after = _cpu_by_thread(pid)
                per = found.setdefault(kind, {})
                total = 0.0
                for name, seconds in after.items():
                    used = (seconds - before.get(name, 0.0)) / args.calls
                    if not name.endswith("(sys)"):
                        total += used
                    per.setdefault(name, []).append(used)
                per.setdefault("(all)", []).append(total)
        return found
    finally:
        await client.close()


def _report_profile(directory: Path, top: int) -> None:
    for path in sorted(directory.glob("*.prof")):
        name = path.name.rsplit("-", 1)[0]
        if not (name == "main" or name.startswith("lre-grpc")):
            continue
        print(f"--- {name}: top {top} by own time")
        stats = pstats.Stats(str(path))
        stats.sort_stats("tottime").print_stats(top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--calls", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--inflight", type=int, default=16)
    ap.add_argument("--kinds", nargs="*", help="only these kinds (as printed)")
    ap.add_argument("--profile", type=Path, help="directory for per-thread cProfile files")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lre-rpc-split.") as tmp:
        home = Path(tmp) / "lre"
        env_path = str(args.tree.resolve())
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            os.environ["LRE_PROFILE_OUT"] = str(args.profile.resolve())
            env_path = f"{PROFILE_DIR}:{env_path}"
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = env_path
        try:
            lre = LreProcess(local_config(home, BAZEL_WORKER), home)
        finally:
            if old is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = old
        started = time.monotonic()
        try:
            found = asyncio.run(_measure(lre, args))
        finally:
            lre.stop()
    print(
        f"tree {args.tree}, {args.rounds} rounds of {args.calls} calls, {args.inflight} in flight"
        f"{', profiled' if args.profile else ''}; load {os.getloadavg()[0]:.1f}"
    )
    for kind, per in found.items():
        medians = {name: statistics.median(v) * 1e3 for name, v in per.items()}
        shown = ", ".join(
            f"{name} {ms:.3f}"
            for name, ms in sorted(medians.items(), key=lambda kv: -kv[1])
            if ms >= 0.002
        )
        print(f"{kind} (ms of lre CPU per call, medians): {shown}")
    if args.profile:
        _report_profile(args.profile, args.top)
    print(f"took {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
