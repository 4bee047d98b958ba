"""Small actions: what lre costs on a build of one-line genrules, and its ceiling.

``--mode bazel`` (the default): ``--actions`` one-line genrules in
``--packages`` packages, all reading ``//common:input.txt``, whose content
changes every round so every action runs again. Real Bazel, one warm server
per side, ``--jobs`` alike; the sides alternate (order reversed every other
round; ``--warmup`` rounds untimed). Sides: ``local`` (Bazel's own sandbox,
left out by ``--no-local``) and lre servers, ``NAME`` (this checkout) or
``NAME=TREE`` (lre from the source tree ``TREE`` first on ``PYTHONPATH``: a
same-run A/B), each with the bench's config (``_client.local_config``).
Per side: walls, medians, ratios to ``local``; per lre side lre's CPU per
action from ``/proc/<lre>/stat``: own threads plus reaped children, less
the command's own CPU (``--calibrate`` runs of it alone), and by thread.

``--mode ceiling``: no Bazel; one lre (``--max-inflight`` slots) and a REAPI
client Executing ``--actions`` distinct ``/bin/sh -c ':'`` actions (``--sleep
S``: ``sleep S``), ``--in-flight`` at once: actions/s, lre's CPU per action
and the share on its Python threads (which hold the interpreter lock): one
over that is the most actions/s lre takes on any number of cores.

``--profile DIR`` puts ``bench/thread_profile`` first on each lre's
``PYTHONPATH`` (one cProfile per thread kind, on its own CPU clock), written
at exit under ``DIR/<side>/``; read them with ``bench/profile_cumulative.py
DIR ACTIONS``. Profiling slows lre several times over: read the shares.

    .venv/bin/python bench/bench_small_actions.py --rounds 5 lre
    .venv/bin/python bench/bench_small_actions.py --rounds 10 --no-local base=/var/tmp/base new
    .venv/bin/python bench/bench_small_actions.py --mode ceiling --actions 3000

A build that fails raises ``RuntimeError`` with the tail of Bazel's output;
an lre that does not start raises with the tail of its log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._client import LreProcess, ReapiClient, local_config
from tests.e2e._bazel import BazelSession

_TICK = os.sysconf("SC_CLK_TCK")
#: The sitecustomize profiler ``--profile`` puts on lre's path.
PROFILER = "thread_profile"
_NUMBERED = re.compile(r"[ _-]*\d+$")
#: Threads of lre that run no Python: the gRPC core's own, and the poller
#: (a loop in grpc's Cython that waits and polls with the lock released).
#: Every other thread runs Python and holds the interpreter lock while on
#: CPU (Trio's worker threads are renamed after what they run, e.g.
#: "_batch from lre", so they are found by elimination).
_NATIVE_THREADS = (
    "event_engine",
    "grpc_global_tim",
    "lifeguard",
    "default-executo",
    "resolver-execu",
    "lre-grpc-poll",
)


@dataclass
class ProcessCpu:
    """CPU seconds of one process: its threads', its reaped children's, and
    each living thread's by name."""

    own: float
    children: float
    threads: dict[str, float] = field(default_factory=dict)

    @classmethod
    def read(cls, pid: int) -> ProcessCpu:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        own = (int(fields[11]) + int(fields[12])) / _TICK
        children = (int(fields[13]) + int(fields[14])) / _TICK
        threads: dict[str, float] = {}
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                comm = (task / "comm").read_text().strip()
                stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # ended meanwhile
            name = "main" if int(task.name) == pid else _NUMBERED.sub("", comm)
            threads[name] = threads.get(name, 0.0) + (int(stat[11]) + int(stat[12])) / _TICK
        return cls(own, children, threads)

    def minus(self, before: ProcessCpu) -> ProcessCpu:
        names = set(self.threads) | set(before.threads)
        return ProcessCpu(
            self.own - before.own,
            self.children - before.children,
            {n: self.threads.get(n, 0.0) - before.threads.get(n, 0.0) for n in names},
        )


def python_share(threads: dict[str, float]) -> float:
    """Of ``threads``' CPU, the share on threads that run Python."""
    total = sum(threads.values())
    python = sum(v for n, v in threads.items() if not n.startswith(_NATIVE_THREADS))
    return python / total if total > 0 else 0.0


# ------------------------------------------------------------------ workspace


def genrule_line(package: int, index: int) -> str:
    """The shell line of one genrule (Bazel's ``$(location)``/``$@`` left in)."""
    return f"echo {package}.{index} $$(cat $(location //common:input.txt)) > $@"


def write_workspace(root: Path, actions: int, packages: int) -> list[str]:
    """``actions`` genrules over ``packages`` packages; returns the targets."""
    (root / "common").mkdir(parents=True, exist_ok=True)
    (root / "WORKSPACE").write_text('workspace(name = "small")\n')
    (root / "common" / "BUILD").write_text('exports_files(["input.txt"])\n')
    write_input(root, "warm")
    targets = []
    for package in range(packages):
        rules = []
        for index in range(package, actions, packages):
            rules.append(
                f'genrule(name = "g{index}", srcs = ["//common:input.txt"], '
                f'outs = ["g{index}.txt"], cmd = "{genrule_line(package, index)}")'
            )
        (root / f"p{package}").mkdir(exist_ok=True)
        (root / f"p{package}" / "BUILD").write_text("\n".join(rules) + "\n")
        targets.append(f"//p{package}:all")
    return targets


def write_input(root: Path, salt: str) -> None:
    (root / "common" / "input.txt").write_text(salt + "\n")


def command_cpu(runs: int, scratch: Path) -> float:
    """CPU seconds of one genrule's command alone (``bash -c`` as Bazel runs
    it), the median of ``runs``."""
    (scratch / "input.txt").write_text("salt\n")
    line = f"echo 1.1 $(cat {scratch}/input.txt) > {scratch}/out.txt"
    samples = []
    for _ in range(runs):
        pid = os.fork()
        if pid == 0:
            try:
                os.execv("/bin/bash", ["/bin/bash", "-c", line])
            finally:
                os._exit(127)
        _, _, usage = os.wait4(pid, 0)
        samples.append(usage.ru_utime + usage.ru_stime)
    return statistics.median(samples)


def lre_flags(address: str, jobs: int) -> list[str]:
    return [
        f"--remote_executor=grpc://{address}",
        "--spawn_strategy=remote",
        "--genrule_strategy=remote",
        "--noremote_accept_cached",
        "--remote_timeout=600",
        f"--jobs={jobs}",
    ]


def local_flags(jobs: int) -> list[str]:
    return ["--spawn_strategy=sandboxed", "--genrule_strategy=sandboxed", f"--jobs={jobs}"]


def start_lre(home: Path, tree: str | None, profile: Path | None) -> LreProcess:
    """``lre up`` with the bench's config; ``tree``: import lre from there."""
    return start_lre_config(home, local_config(home), tree, profile)


class Side:
    """One side of the comparison: a workspace, its Bazel server, maybe an lre."""

    def __init__(self, work: Path, name: str, args: argparse.Namespace, tree: str | None) -> None:
        self.name = name
        self.root = work / name / "ws"
        self.targets = write_workspace(self.root, args.actions, args.packages)
        self.lre: LreProcess | None = None
        if name != "local":
            prof = args.profile / name if args.profile else None
            self.lre = start_lre(work / name / "lre", tree, prof)
            self.flags = lre_flags(self.lre.address, args.jobs)
        else:
            self.flags = local_flags(args.jobs)
        self.bazel = BazelSession(self.root, work / name / "bazel-root", max_idle_secs=900)
        self.walls: list[float] = []
        self.cpu: list[ProcessCpu] = []

    def build(self, expect: int) -> tuple[float, ProcessCpu | None]:
        """One build after a fresh common input; its wall and lre's CPU delta."""
        write_input(self.root, uuid.uuid4().hex)
        before = ProcessCpu.read(self.lre.proc.pid) if self.lre else None
        started = time.monotonic()
        result = self.bazel.build(self.targets, self.flags)
        wall = time.monotonic() - started
        if result.returncode != 0 or result.summary is None:
            tail = "\n".join(result.output.splitlines()[-30:])
            raise RuntimeError(f"{self.name}: bazel build failed:\n{tail}")
        ran = result.summary.spawns
        if ran != expect:
            raise RuntimeError(f"{self.name}: {ran} actions ran, not {expect}: {result.summary}")
        if self.lre is None or before is None:
            return wall, None
        return wall, ProcessCpu.read(self.lre.proc.pid).minus(before)

    def close(self) -> None:
        try:
            self.bazel.shutdown()
        finally:
            if self.lre is not None:
                self.lre.stop()


def bazel_mode(args: argparse.Namespace) -> dict[str, object]:
    sides_spec = ([] if args.no_local else ["local"]) + (args.sides or ["lre"])
    report: dict[str, object] = {"args": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory(prefix="lre-small-", dir=args.workdir) as tmp:
        work = Path(tmp)
        command = command_cpu(args.calibrate, work)
        print(f"the command alone: {command * 1e3:.2f} ms CPU", flush=True)
        sides: list[Side] = []
        try:
            for spec in sides_spec:
                name, _, tree = spec.partition("=")
                sides.append(Side(work, name, args, tree or None))
            for side in sides:
                side.build(args.actions)  # server up, analysis warm
            for round_ in range(args.warmup + args.rounds):
                order = sides if round_ % 2 == 0 else sides[::-1]
                line = []
                for side in order:
                    wall, cpu = side.build(args.actions)
                    if round_ >= args.warmup:
                        side.walls.append(wall)
                        if cpu is not None:
                            side.cpu.append(cpu)
                    per = ""
                    if cpu is not None:
                        spent = cpu.own + cpu.children - command * args.actions
                        per = f" ({spent / args.actions * 1e3:.2f} ms/action)"
                    line.append(f"{side.name}={wall:.2f}s{per}")
                tag = "warmup" if round_ < args.warmup else f"round {round_ - args.warmup + 1}"
                print(f"{tag}: " + ", ".join(line), flush=True)
        finally:
            for side in sides:
                side.close()
    base = sides[0]
    base_median = statistics.median(base.walls)
    results: dict[str, object] = {"command_cpu_ms": command * 1e3}
    for side in sides:
        median = statistics.median(side.walls)
        entry: dict[str, object] = {"walls_s": side.walls, "median_s": median}
        text = f"{side.name}: median {median:.2f} s"
        if side is not base:
            paired = statistics.median(w / b for w, b in zip(side.walls, base.walls, strict=True))
            entry["ratio_of_medians"] = median / base_median
            entry["median_paired_ratio"] = paired
            text += f" = {median / base_median:.3f}x {base.name} (paired {paired:.3f})"
        if side.cpu:
            n = args.actions
            own = statistics.median(c.own / n for c in side.cpu)
            kids = statistics.median(c.children / n for c in side.cpu)
            total = statistics.median((c.own + c.children - command * n) / n for c in side.cpu)
            threads: dict[str, float] = {}
            for c in side.cpu:
                for t, v in c.threads.items():
                    threads[t] = threads.get(t, 0.0) + v / n / len(side.cpu)
            entry |= {
                "own_ms": own * 1e3,
                "children_ms": kids * 1e3,
                "lre_cpu_per_action_ms": total * 1e3,
                "threads_ms": {t: v * 1e3 for t, v in threads.items()},
            }
            text += (
                f"; lre CPU/action {total * 1e3:.2f} ms (own {own * 1e3:.2f}, children "
                f"{kids * 1e3:.2f}, less the command {command * 1e3:.2f})\n    by thread: "
                + ", ".join(
                    f"{t} {v * 1e3:.2f}"
                    for t, v in sorted(threads.items(), key=lambda kv: -kv[1])
                    if v * 1e3 >= 0.01
                )
            )
        results[side.name] = entry
        print(text)
    report["results"] = results
    return report


# -------------------------------------------------------------------- ceiling


def ceiling_mode(args: argparse.Namespace) -> dict[str, object]:
    body = f"sleep {args.sleep}" if args.sleep else ":"

    async def run(address: str, lre_pid: int) -> dict[str, object]:
        client = ReapiClient(address)
        try:
            salt = uuid.uuid4().hex
            digests = []
            for i in range(args.actions):
                digests.append(await client.prepare(["/bin/sh", "-c", f"{body} # {salt} {i}"]))
            gate = asyncio.Semaphore(args.in_flight)
            failures = 0

            async def one(digest: object) -> None:
                nonlocal failures
                async with gate:
                    response = await client.execute(digest)  # type: ignore[arg-type]
                    if response.status.code != 0 or response.result.exit_code != 0:
                        failures += 1

            before = ProcessCpu.read(lre_pid)
            started = time.monotonic()
            await asyncio.gather(*(one(d) for d in digests))
            wall = time.monotonic() - started
            cpu = ProcessCpu.read(lre_pid).minus(before)
        finally:
            await client.close()
        n = args.actions
        # One interpreter lock: however many cores, lre runs at most one
        # second of Python per second, so its Python CPU per action bounds it.
        under_lock = sum(cpu.threads.values()) * python_share(cpu.threads) / n
        result: dict[str, object] = {
            "python_cpu_ms": under_lock * 1e3,
            "lock_bound_actions_per_s": 1 / under_lock if under_lock > 0 else 0.0,
            "wall_s": wall,
            "actions_per_s": n / wall,
            "own_ms": cpu.own / n * 1e3,
            "children_ms": cpu.children / n * 1e3,
            "python_share_of_threads": python_share(cpu.threads),
            "threads_ms": {t: v / n * 1e3 for t, v in cpu.threads.items()},
            "failures": failures,
        }
        print(
            f"{n} actions in {wall:.2f} s = {n / wall:.0f}/s; lre CPU/action own "
            f"{cpu.own / n * 1e3:.2f} ms, children {cpu.children / n * 1e3:.2f} ms; "
            f"on Python threads {python_share(cpu.threads):.0%} of the threads' CPU "
            f"({under_lock * 1e3:.2f} ms: at most {1 / max(under_lock, 1e-9):.0f} actions/s "
            f"on any number of cores); failures {failures}\n    by thread: "
            + ", ".join(
                f"{t} {v / n * 1e3:.2f}"
                for t, v in sorted(cpu.threads.items(), key=lambda kv: -kv[1])
                if v / n * 1e3 >= 0.01
            ),
            flush=True,
        )
        return result

    report: dict[str, object] = {"args": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory(prefix="lre-ceiling-", dir=args.workdir) as tmp:
        home = Path(tmp) / "lre"
        config = json.loads(local_config(home))
        config["workers"][0]["local"]["max_inflight_tasks"] = args.max_inflight
        tree = None
        if args.sides:
            tree = args.sides[0].partition("=")[2] or None
        prof = args.profile / "ceiling" if args.profile else None
        with start_lre_config(home, json.dumps(config), tree, prof) as lre:
            runs = [asyncio.run(run(lre.address, lre.proc.pid)) for _ in range(args.rounds)]
    report["runs"] = runs
    rates = [float(r["actions_per_s"]) for r in runs]  # type: ignore[arg-type]
    print(f"median {statistics.median(rates):.0f} actions/s over {len(runs)} runs")
    return report


def start_lre_config(home: Path, config: str, tree: str | None, profile: Path | None) -> LreProcess:
    home.mkdir(parents=True, exist_ok=True)
    saved = os.environ.get("PYTHONPATH")
    extra = [tree] if tree else []
    if profile:
        profile.mkdir(parents=True, exist_ok=True)
        extra.append(str(Path(__file__).resolve().parent / PROFILER))
        os.environ["LRE_PROFILE_OUT"] = str(profile)
    if extra:
        os.environ["PYTHONPATH"] = os.pathsep.join([*extra, *([saved] if saved else [])])
    try:
        return LreProcess(config, home)
    finally:
        os.environ.pop("LRE_PROFILE_OUT", None)
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("sides", nargs="*", metavar="NAME[=TREE]", help="lre sides (default: lre)")
    ap.add_argument("--mode", choices=("bazel", "ceiling"), default="bazel")
    ap.add_argument("--actions", type=int, default=400)
    ap.add_argument("--packages", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--no-local", action="store_true", help="compare lre sides only")
    ap.add_argument("--calibrate", type=int, default=200, help="runs of the command alone")
    ap.add_argument("--in-flight", type=int, default=200, help="ceiling: Executes at once")
    ap.add_argument("--max-inflight", type=int, default=64, help="ceiling: lre's slots")
    ap.add_argument("--sleep", type=float, default=0.0, help="ceiling: each action's sleep")
    ap.add_argument("--profile", type=Path, help="cProfile lre's threads into this dir")
    ap.add_argument("--workdir", type=Path, default=Path("/var/tmp"))
    args = ap.parse_args()
    modes = {"bazel": bazel_mode, "ceiling": ceiling_mode}
    modes[args.mode](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
