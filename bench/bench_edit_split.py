"""Where the time of one edit-rebuild goes: Bazel's local sandbox against lre,
phase by phase, in one run with alternating rounds.

    .venv/bin/python bench/bench_edit_split.py [--rounds 10] [--warmup 2] \\
        [--modules 40] [--funcs 8] [--make-ws ../shared/tools/peer/make_ws.py]

What it does:

- generates a workspace with the peer harness's ``make_ws.py`` (``--modules``
  C modules, one ``cc_library`` each, and ``//:app``), starts lre on it with
  ``lre up --detach`` (its embedded default config, ``LRE_HOME`` a scratch
  directory) and uses exactly the ``build:lre`` flags of the ``lre.bazelrc``
  it writes, plus ``--noremote_accept_cached`` so that every spawn executes;
- keeps two Bazel servers warm, one per side, and builds ``//:app`` on each;
- per round: one module's source gets a new exported constant (so its object
  and the binary really change), then each side rebuilds (compile + link),
  the order reversed every other round, with ``--profile``;
- reads per build: Bazel's own phases per spawn action from its profile
  (``_bazel_profile``), lre's phases per action from the
  ``ExecutedActionMetadata`` stamps of the results it wrote (the phase model
  of ``lre.snapshot``, split finer at every stamp lre's worker sets) and
  lre's Execute duration from ``/metrics`` (``build_probe``).

Prints every build, then per phase the medians of both sides and the ratio.
Fails (exit 1, with the reason) when a build fails, runs a spawn the wrong way
(locally on the lre side, remotely on the local side) or the two sides run
different spawn counts.
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bazel_profile import LOCAL_STEPS, REMOTE_STEPS, ActionPhases, action_phases, load_events
from _instant_executor import InstantExecutor
from bench_project import BenchError, lre_bazelrc_flags, running_lre
from build_probe import Probe, Split, bazel_server

from tests.e2e._bazel import BazelSession

TARGET = "//:app"

#: lre's phases of one action, between two of its ExecutedActionMetadata
#: stamps (the four phases of ``lre.snapshot.Phase``, split at every stamp).
LRE_PHASES: tuple[tuple[str, str, str], ...] = (
    ("cache lookup + input check + queue", "queued", "worker_start"),
    ("action directory taken", "worker_start", "input_fetch_start"),
    ("staging (tree read, inputs linked)", "input_fetch_start", "input_fetch_completed"),
    ("view chosen", "input_fetch_completed", "execution_start"),
    ("spawn + run + reap", "execution_start", "execution_completed"),
    ("inputs checked after the run", "execution_completed", "output_upload_start"),
    ("output collection (hash, store)", "output_upload_start", "output_upload_completed"),
    ("result built", "output_upload_completed", "worker_completed"),
)


def make_workspace(make_ws: Path, ws: Path, modules: int, funcs: int) -> None:
    """Generate the edit loop's workspace at ``ws`` with the peer harness's
    ``make_ws.py``; raises ``CalledProcessError`` when it fails."""
    subprocess.run(
        [sys.executable, str(make_ws), str(ws), "--files", str(modules), "--funcs", str(funcs)],
        check=True,
        capture_output=True,
    )


def find_make_ws(given: Path | None) -> Path:
    """``--make-ws`` or the first ``shared/tools/peer/make_ws.py`` beside a
    parent of this checkout; raises BenchError when there is none."""
    if given is not None:
        return given
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "tools" / "peer" / "make_ws.py"
        if candidate.is_file():
            return candidate
    raise BenchError("make_ws.py not found; pass --make-ws")


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _edit(source: Path, original: str, serial: int) -> None:
    token = secrets.token_hex(8)
    source.write_text(original + f'\nconst char lre_bench_edit_{serial}[] = "{token}";\n')


class Side:
    """One side: its Bazel server, flags, probe and what its builds showed."""

    def __init__(self, name: str, bazel: BazelSession, flags: list[str], work: Path) -> None:
        self.name = name
        self.bazel = bazel
        self.flags = flags
        self.work = work
        self.probe: Probe | None = None
        self.walls: list[float] = []
        self.actions: list[ActionPhases] = []
        self.builds: list[list[ActionPhases]] = []
        self.splits: list[Split] = []

    def build(self, *, profile: Path | None = None) -> int:
        """Build the target; returns the spawn count. Raises BenchError."""
        flags = [*self.flags, *([f"--profile={profile}"] if profile else [])]
        result = self.bazel.build([TARGET], flags)
        tail = "\n".join(result.output.splitlines()[-30:])
        if result.returncode != 0 or result.summary is None:
            raise BenchError(f"{self.name} build failed (exit {result.returncode}):\n{tail}")
        summary = result.summary
        right = summary.local if self.name == "local" else summary.count("remote")
        if right != summary.spawns:
            raise BenchError(f"{self.name} build ran spawns the wrong way: {summary}")
        return summary.spawns

    def timed_build(self, serial: int, *, timed: bool) -> tuple[int, str]:
        """One profiled build with the probe around it; records it when ``timed``."""
        assert self.probe is not None
        profile = self.work / f"profile-{self.name}-{serial}.json"
        before = self.probe.snapshot(before=True)
        started = time.monotonic()
        spawns = self.build(profile=profile)
        wall = time.monotonic() - started
        split = self.probe.split(before, self.probe.snapshot(before=False))
        steps = LOCAL_STEPS if self.name == "local" else REMOTE_STEPS
        actions = action_phases(load_events(profile), steps)
        profile.unlink()
        if timed:
            self.walls.append(wall)
            self.actions += actions
            self.builds.append(actions)
            self.splits.append(split)
        line = ", ".join(f"{a.name} {1000 * a.total:.0f} ms" for a in actions)
        return spawns, f"wall {wall:.3f}s; {line}"


def _step_table(sides: dict[str, Side]) -> None:
    names = list(sides)
    print("Bazel's phases per spawn action (ms, medians over every action of the timed builds):")
    print(f"  {'phase':<34}" + "".join(f"{n:>9}" for n in names))

    def row(label: str, values: dict[str, list[float] | None]) -> None:
        cells = [
            "-" if values[n] is None else f"{1000 * _median(values[n] or []):.1f}" for n in names
        ]
        print(f"  {label:<34}" + "".join(f"{c:>9}" for c in cells))

    for label in dict.fromkeys([*LOCAL_STEPS, *REMOTE_STEPS]):
        row(
            label,
            {
                n: [a.steps[label] for a in side.actions]
                if label in (LOCAL_STEPS if n == "local" else REMOTE_STEPS)
                else None
                for n, side in sides.items()
            },
        )
    row(
        "unprofiled (span - steps)",
        {n: [a.unprofiled for a in s.actions] for n, s in sides.items()},
    )
    row("action span", {n: [a.total for a in s.actions] for n, s in sides.items()})
    for kind in ("Compiling", "Linking"):
        spans = {
            n: [a.total for a in s.actions if a.name.startswith(kind)] for n, s in sides.items()
        }
        local = _median(spans["local"])
        ratios = "  ".join(f"{n} {_median(spans[n]) / local:.3f}x" for n in names[1:])
        print(
            f"  {kind + ' span':<34}"
            + "".join(f"{1000 * _median(spans[n]):>9.1f}" for n in names)
            + f"   {ratios}"
        )
        for label in ("subprocess run", "execute remotely", "download"):
            values = {
                n: [a.steps[label] for a in s.actions if a.name.startswith(kind)]
                if label in (LOCAL_STEPS if n == "local" else REMOTE_STEPS)
                else None
                for n, s in sides.items()
            }
            row(f"  {kind.lower()}: {label}", values)
        row(
            f"  {kind.lower()}: unprofiled",
            {
                n: [a.unprofiled for a in s.actions if a.name.startswith(kind)]
                for n, s in sides.items()
            },
        )


def _kind(outputs: tuple[str, ...]) -> str:
    """``compile`` for an action whose outputs are object files, else ``link``."""
    return "compile" if outputs and all(o.endswith((".o", ".d")) for o in outputs) else "link"


def _lre_table(remote: Side) -> None:
    stamps = [s for split in remote.splits for s in split.actions.stamps]
    kinds = [_kind(o) for split in remote.splits for o in split.actions.outputs]
    print(
        f"lre's phases per action (ms; medians over {len(stamps)} actions;"
        " then compile / link alone):"
    )
    for label, first, last in LRE_PHASES:
        values = {
            kind: [
                s[last] - s[first]
                for s, k in zip(stamps, kinds, strict=True)
                if first in s and last in s and kind in ("all", k)
            ]
            for kind in ("all", "compile", "link")
        }
        print(
            f"  {label:<40}{1000 * _median(values['all']):>9.2f}"
            f"{1000 * _median(values['compile']):>9.2f}{1000 * _median(values['link']):>9.2f}"
        )
    done = [s["worker_completed"] - s["queued"] for s in stamps if "queued" in s]
    print(f"  {'queued -> worker completed':<40}{1000 * _median(done):>9.2f}")
    outside = [v for v in (split.outside_worker_ms() for split in remote.splits) if v is not None]
    execute = [v for v in (split.execute_ms() for split in remote.splits) if v is not None]
    print(
        f"  {'Execute call as lre served it (mean)':<40}{_median(execute):>9.2f}   median over"
        " builds of the per-build mean"
    )
    print(
        f"  {'outside the worker (decode, AC write, reply)':<40}{_median(outside):>9.2f}"
        "   = Execute mean - (worker completed - queued) mean"
    )


def _report(sides: dict[str, Side]) -> None:
    local = sides["local"].walls
    for name in list(sides)[1:]:
        walls = sides[name].walls
        pairs = [r / loc for r, loc in zip(walls, local, strict=True)]
        print(
            f"edit-rebuild wall: local {_median(local):.3f} s, {name} {_median(walls):.3f} s; "
            f"ratio of medians {_median(walls) / _median(local):.3f}x, per-pair median "
            f"{_median(pairs):.3f}x ({', '.join(f'{p:.2f}' for p in pairs)})"
        )
    if "instant" in sides:
        gaps = [
            1000 * (r - i) for r, i in zip(sides["lre"].walls, sides["instant"].walls, strict=True)
        ]
        print(
            f"lre minus instant per round (ms): median {_median(gaps):.1f}"
            f" ({', '.join(f'{g:.0f}' for g in gaps)})"
        )
    _step_table(sides)
    _lre_table(sides["lre"])


def _run(args: argparse.Namespace) -> None:
    make_ws = find_make_ws(args.make_ws)
    with (
        tempfile.TemporaryDirectory(prefix="lre-bench-edit-split-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        work = Path(tmp)
        ws = work / "ws"
        make_workspace(make_ws, ws, args.modules, args.funcs)
        source = ws / "src" / f"mod_{args.module:02d}.c"
        original = source.read_text()
        info = stack.enter_context(running_lre(work / "lre-home", ws))
        flags = [*lre_bazelrc_flags(ws / "lre.bazelrc"), "--noremote_accept_cached"]
        print(f"lre: pid {info['pid']}; flags {flags}")
        side_flags: list[tuple[str, list[str]]] = [("local", []), ("lre", flags)]
        instant: InstantExecutor | None = None
        if args.instant:
            instant = stack.enter_context(InstantExecutor(str(info["grpc_address"])))
            replayed = [f for f in side_flags[1][1] if not f.startswith("--remote_executor=")]
            side_flags.append(
                (
                    "instant",
                    [
                        *replayed,
                        f"--remote_executor=grpc://{instant.address}",
                        f"--remote_cache=grpc://{info['grpc_address']}",
                    ],
                )
            )
        sides: dict[str, Side] = {}
        for name, flags in side_flags:
            bazel = stack.enter_context(BazelSession(ws, work / f"bazel-{name}", max_idle_secs=900))
            sides[name] = Side(name, bazel, flags, work)
            sides[name].build()  # server start, toolchain autoconfiguration, clean build
        for side in sides.values():
            side.probe = Probe(
                bazel_server(side.bazel.output_user_root).pid,
                int(str(info["pid"])),
                str(info["status_address"]),
                work / "lre-home" / "ac" / "actions.log",
            )
        runs = [n for n in sides if n != "instant"]
        for round_ in range(args.warmup + args.rounds):
            timed = round_ >= args.warmup
            # The instant side replays lre's results of this round: always right after lre.
            order = tuple(runs if round_ % 2 == 0 else runs[::-1])
            if instant is not None:
                order = tuple(x for n in order for x in ((n, "instant") if n == "lre" else (n,)))
            label = f"round {round_ - args.warmup + 1}" if timed else f"warm-up {round_ + 1}"
            _edit(source, original, round_)
            spawns = {}
            for name in order:
                spawns[name], text = sides[name].timed_build(round_, timed=timed)
                print(f"{label} {name}: {text}", flush=True)
            if len(set(spawns.values())) != 1 or spawns["local"] < 2:
                raise BenchError(f"{label}: spawns {spawns}, want the same, at least 2")
        print(f"{args.rounds} rounds ({args.warmup} warm-up), order reversed every other round:")
        _report(sides)
        if instant is not None:
            print(
                f"instant executor: {instant.served} answers from lre's action cache"
                f" (median {1000 * _median(instant.answer_seconds):.2f} ms at the executor),"
                f" {instant.forwarded} forwarded to lre"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds (default 2)")
    parser.add_argument("--modules", type=int, default=40)
    parser.add_argument("--funcs", type=int, default=8)
    parser.add_argument("--module", type=int, default=7, help="the module edited (default 7)")
    parser.add_argument("--make-ws", type=Path, default=None)
    parser.add_argument(
        "--instant",
        action="store_true",
        help="add a side whose Execute is answered at once from lre's action cache"
        " (_instant_executor): the floor of Bazel's remote path",
    )
    args = parser.parse_args()
    started = time.monotonic()
    try:
        _run(args)
    except (BenchError, RuntimeError, subprocess.CalledProcessError) as error:
        print(f"FAILED: {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        print(f"took {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
