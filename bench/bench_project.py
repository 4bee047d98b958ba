"""A real C project (brotli, from its release sources) built locally sandboxed
and through lre: clean builds and the edit-rebuild loop, with a CPU and
latency split per build.

    .venv/bin/python bench/bench_project.py [--rounds 6] [--warmup 2] [--edits 3]

What it does (see docs/performance.md, "A real project"):

- fetches brotli's sdist once into ``--cache`` (pip; sha256 checked) and
  generates an offline Bazel 4.2.3 workspace around its C sources
  (``real_project.py``);
- starts lre with ``lre up --detach`` on its embedded default config
  (``LRE_HOME`` a scratch directory), which writes ``lre.bazelrc`` into the
  workspace; the remote builds use exactly the ``build:lre`` flags of that
  file, plus ``--noremote_accept_cached`` so that every spawn executes;
- keeps two Bazel servers warm, one per side (each its own output_user_root),
  so each side's timings start from the same warm state (the lre flags no
  change build options or action keys, but a shared
  server would still hand one side the other's local action cache);
- untimed warm-up rounds, then rounds in alternating order (reversed every
  other round): a clean build on each side (``bazel clean``, then build
  ``//...``), then ``--edits`` times: change ``c/enc/encode.c`` (a new
  exported constant, so the object and the tool really change) and rebuild
  on each side.

It fails (exit 1, with the reason) when a build fails, when the remote build
ran anything locally or took a cache hit, when a build ran an unexpected
number of spawns, when Bazel discarded its analysis cache in a timed build,
when the tool built locally and through lre differ, or when the tool fails
the release's test vectors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import json5
from _client import free_port
from build_probe import Probe, Split, bazel_server
from real_project import (
    SPAWNS,
    ProjectError,
    ProjectWorkspace,
    check_tool,
    default_cache_dir,
    fetch_sdist,
    generate_project_workspace,
    sha256_of,
)

import lre.config
from tests.e2e._bazel import BazelSession

#: The sides a run may compare (``--pair``): Bazel's own sandboxed strategy,
#: lre on its embedded default config, a second lre just like it (an A/A
#: run), and lre with ``sandbox_view: false`` (the view's cost on a real
#: project).
SIDE_NAMES = ("local", "lre", "lre-again", "lre-noview")
KINDS = ("clean", "edit")
_DISCARDED = "discarding analysis cache"


class BenchError(Exception):
    """A build failed or did not run the way the bench requires."""


def lre_bazelrc_flags(path: Path) -> list[str]:
    """The ``build:lre`` flags of the ``lre.bazelrc`` that ``lre up`` wrote."""
    text = path.read_text()
    if "build --config=lre" not in text.splitlines():
        raise BenchError(f"{path} does not make --config=lre the default; was it written by lre?")
    flags = []
    for line in text.splitlines():
        if line.startswith("build:lre "):
            flags += shlex.split(line.removeprefix("build:lre "))
    if not any(flag.startswith("--remote_executor=") for flag in flags):
        raise BenchError(f"{path} has no --remote_executor")
    return flags


def noview_config(path: Path) -> Path:
    """Write to ``path`` a config that is the embedded default with the local
    worker's ``sandbox_view`` off (lists replace the default's, so the whole
    worker list is given); returns ``path``."""
    default = json5.loads((Path(lre.config.__file__).parent / "default.json5").read_text())
    workers = default["workers"]
    if len(workers) != 1 or "local" not in workers[0]:
        raise BenchError(f"the embedded default has other workers than one local: {workers}")
    workers[0]["local"]["sandbox_view"] = False
    path.write_text(json.dumps({"workers": workers}, indent=2))
    return path


@contextlib.contextmanager
def running_lre(home: Path, ws: Path, config: Path | None = None) -> Iterator[dict[str, object]]:
    """``lre up --detach`` for ``ws`` with LRE_HOME=home (and ``--config
    config`` when given); yields ``lre status --json``; ``lre down`` at the
    end. Raises BenchError when lre does not start."""
    env = {**os.environ, "LRE_HOME": str(home)}
    lre = [sys.executable, "-m", "lre"]
    port = str(free_port())
    extra = [] if config is None else ["--config", str(config)]
    up = subprocess.run(
        [*lre, "up", "--detach", "--repo", str(ws), "--no-edit", "--port", port, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if up.returncode != 0:
        raise BenchError(f"lre up failed (exit {up.returncode}):\n{up.stdout}{up.stderr}")
    try:
        status = subprocess.run(
            [*lre, "status", "--json"], env=env, capture_output=True, text=True, timeout=60
        )
        info = json.loads(status.stdout)
        if not info.get("running"):
            raise BenchError(f"lre status says it is not running: {status.stdout}")
        yield info
    finally:
        subprocess.run([*lre, "down"], env=env, capture_output=True, timeout=120)


class Side:
    """One side of the comparison: its Bazel server, flags and last tool digest."""

    def __init__(self, name: str, bazel: BazelSession, flags: list[str]) -> None:
        self.name = name
        self.bazel = bazel
        self.flags = flags
        self.remote = name != "local"
        #: The side's own lre (None for the local side): LRE_HOME, status.
        self.home: Path | None = None
        self.info: dict[str, object] | None = None
        self.bazel_bin: Path | None = None
        self.probe: Probe | None = None

    def build(self, *, timed: bool, expected_spawns: int | None) -> int:
        """Build //... and check how its spawns ran; raises BenchError."""
        result = self.bazel.build(["//..."], self.flags)
        tail = "\n".join(result.output.splitlines()[-30:])
        if result.returncode != 0 or result.summary is None:
            raise BenchError(f"{self.name} build failed (exit {result.returncode}):\n{tail}")
        summary = result.summary
        if not self.remote:
            ok = summary.local == summary.spawns
        else:
            ok = summary.count("remote") == summary.spawns
        if not ok:
            raise BenchError(f"{self.name} build ran spawns the wrong way: {summary}")
        if expected_spawns is not None and summary.spawns != expected_spawns:
            raise BenchError(
                f"{self.name} build ran {summary.spawns} spawns, want {expected_spawns}"
            )
        if timed and _DISCARDED in result.output:
            raise BenchError(f"{self.name} build discarded Bazel's analysis cache:\n{tail}")
        return summary.spawns

    def clean(self) -> None:
        proc = self.bazel.run("clean", *self.flags)
        if proc.returncode != 0:
            raise BenchError(f"{self.name}: bazel clean failed:\n{proc.stdout[-2000:]}")

    def tool(self) -> Path:
        if self.bazel_bin is None:
            proc = self.bazel.run("info", *self.flags, "bazel-bin")
            if proc.returncode != 0:
                raise BenchError(f"{self.name}: bazel info failed:\n{proc.stdout[-2000:]}")
            self.bazel_bin = Path(proc.stdout.strip().splitlines()[-1])
        return self.bazel_bin / ProjectWorkspace.binary


def _edit(ws: ProjectWorkspace, original: str, serial: int) -> None:
    """A real change: ``encode.c`` gets a new exported constant."""
    token = secrets.token_hex(8)
    ws.edited_source.write_text(original + f'\nconst char lre_bench_edit_{serial}[] = "{token}";\n')


def _fmt(split: Split) -> str:
    parts = [
        f"wall {split.wall:.2f}s",
        f"busy {split.busy:.2f}",
        f"jvm {split.jvm:.2f}",
        f"jvm-children {split.jvm_children:.2f}",
        f"lre {split.lre:.2f}",
        f"lre-actions {split.lre_children:.2f}",
        f"other {split.other:.2f}",
    ]
    per_action = split.lre_ms_per_action()
    if per_action is not None:
        parts.append(f"lre/action {per_action:.1f}ms")
    if split.executes and len(split.actions.run) != split.executes:
        # The latency figures then stand for part of the actions only.
        parts.append(f"action results read {len(split.actions.run)} of {split.executes}")
    if split.ladder_kills or split.retries:
        parts.append(f"ladder kills {split.ladder_kills}, retries {split.retries}")
    return ", ".join(parts)


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _report(splits: dict[tuple[str, str], list[Split]], pair: tuple[str, str]) -> None:
    base, compared = pair
    for kind in KINDS:
        local = [s.wall for s in splits[(kind, base)]]
        remote = [s.wall for s in splits[(kind, compared)]]
        ratios = [r / loc for r, loc in zip(remote, local, strict=True)]
        print(
            f"{kind}: {base} median {_median(local):.2f} s, {compared} median "
            f"{_median(remote):.2f} s; {compared}/{base}: ratio of medians "
            f"{_median(remote) / _median(local):.3f}x, per-pair ratios median "
            f"{_median(ratios):.3f}x ({', '.join(f'{r:.2f}' for r in ratios)})"
        )
    print("CPU split, medians (CPU-seconds per build; wall in seconds):")
    columns: dict[str, Callable[[Split], float]] = {
        "wall": lambda s: s.wall,
        "busy": lambda s: s.busy,
        "jvm": lambda s: s.jvm,
        "jvm children (local actions)": lambda s: s.jvm_children,
        "lre": lambda s: s.lre,
        "lre children (lre's actions)": lambda s: s.lre_children,
        "other": lambda s: s.other,
    }
    noisy = []
    for (kind, side), rows in splits.items():
        values = ", ".join(f"{c} {_median([f(s) for s in rows]):.2f}" for c, f in columns.items())
        print(f"  {kind} {side}: {values}")
        other, busy = _median([s.other for s in rows]), _median([s.busy for s in rows])
        if other > max(1.0, 0.1 * busy):
            noisy.append(f"{kind} {side} ({other:.1f} of {busy:.1f} CPU-s)")
    if noisy:
        print(
            "WARNING: other processes kept the machine busy during "
            + ", ".join(noisy)
            + ": the wall times and ratios above are not those of a quiet machine"
        )


def _pair(text: str) -> tuple[str, str]:
    names = tuple(text.split(","))
    if len(names) != 2 or len(set(names)) != 2 or not set(names) <= set(SIDE_NAMES):
        raise argparse.ArgumentTypeError(f"want two of {', '.join(SIDE_NAMES)}, got {text!r}")
    return names[0], names[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="timed rounds (default 6)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds (default 2)")
    parser.add_argument("--edits", type=int, default=3, help="edit-rebuilds per round (default 3)")
    parser.add_argument("--cache", type=Path, default=default_cache_dir())
    parser.add_argument(
        "--pair",
        type=_pair,
        default=("local", "lre"),
        help=(
            "the two sides, baseline first (default local,lre; lre-noview,lre: the view's "
            "cost; lre,lre-again: the A/A spread)"
        ),
    )
    args = parser.parse_args()
    started = time.monotonic()
    try:
        _run(args)
    except (BenchError, ProjectError, RuntimeError) as error:
        print(f"FAILED: {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        print(f"took {time.monotonic() - started:.0f} s", flush=True)
    return 0


def _run(args: argparse.Namespace) -> None:
    sdist = fetch_sdist(args.cache)
    print(f"project: {sdist.name}, sha256 {sha256_of(sdist)}", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="lre-bench-project-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        work = Path(tmp)
        ws = generate_project_workspace(sdist, work)
        original = ws.edited_source.read_text()
        pair: tuple[str, str] = args.pair
        sides: dict[str, Side] = {}
        for name in pair:
            flags: list[str] = []
            # Numbered: one side's directory must not be a prefix of the other's
            # (bazel_server finds a JVM by a substring of its command line).
            home = work / f"home-{len(sides)}-{name}"
            if name != "local":
                config = noview_config(work / "noview.json") if name == "lre-noview" else None
                # lre up leaves an lre.bazelrc that names another running lre
                # alone: remove the first side's, so this side writes its own.
                (ws.root / "lre.bazelrc").unlink(missing_ok=True)
                info = stack.enter_context(running_lre(home, ws.root, config))
                flags = [*lre_bazelrc_flags(ws.root / "lre.bazelrc"), "--noremote_accept_cached"]
                if f"--remote_executor=grpc://{info['grpc_address']}" not in flags:
                    raise BenchError(f"{name}: lre.bazelrc does not name its lre: {flags}")
                print(f"{name}: lre pid {info['pid']} on {info['grpc_address']}", flush=True)
                print(f"{name} side flags: {' '.join(flags)}", flush=True)
            bazel = stack.enter_context(
                BazelSession(ws.root, work / f"bazel-{len(sides)}-{name}", max_idle_secs=900)
            )
            sides[name] = Side(name, bazel, flags)
            sides[name].build(timed=False, expected_spawns=SPAWNS)  # server start, autoconfig
            vectors = check_tool(sides[name].tool(), ws.testdata, work / f"check-{name}")
            # The local side's probe still needs an lre to sample: the other side's.
            sides[name].home = home if name != "local" else None
            sides[name].info = info if name != "local" else None
        serving = next(side for side in sides.values() if side.info is not None)
        for side in sides.values():
            source = side if side.info is not None else serving
            assert source.info is not None and source.home is not None
            side.probe = Probe(
                bazel_server(side.bazel.output_user_root).pid,
                int(str(source.info["pid"])),
                str(source.info["status_address"]),
                source.home / "ac" / "actions.log",
            )
        print(f"both tools pass {vectors} test vectors of the release", flush=True)
        splits: dict[tuple[str, str], list[Split]] = {(k, s): [] for k in KINDS for s in pair}
        serial = 0
        last_digest = ""
        for round_ in range(args.warmup + args.rounds):
            timed = round_ >= args.warmup
            order = pair if round_ % 2 == 0 else pair[::-1]
            label = f"round {round_ - args.warmup + 1}" if timed else f"warm-up {round_ + 1}"
            for kind in ["clean"] + ["edit"] * args.edits:
                if kind == "edit":
                    serial += 1
                    _edit(ws, original, serial)
                digests, spawns = {}, {}
                for name in order:
                    side = sides[name]
                    if kind == "clean":
                        side.clean()
                    assert side.probe is not None
                    before = side.probe.snapshot(before=True)
                    spawns[name] = side.build(
                        timed=timed, expected_spawns=SPAWNS if kind == "clean" else None
                    )
                    split = side.probe.split(before, side.probe.snapshot(before=False))
                    digests[name] = sha256_of(side.tool())
                    if timed:
                        splits[(kind, name)].append(split)
                    print(f"{label} {kind} {name}: {_fmt(split)}", flush=True)
                if len(set(digests.values())) != 1:
                    raise BenchError(f"{label} {kind}: the tools differ: {digests}")
                if kind == "edit" and (len(set(spawns.values())) != 1 or min(spawns.values()) < 2):
                    raise BenchError(f"{label} edit: spawns {spawns}, want the same, at least 2")
                if kind == "edit" and digests[pair[0]] == last_digest:
                    raise BenchError(f"{label} edit: the tool did not change")
                last_digest = digests[pair[0]]
        for name, side in sides.items():
            check_tool(side.tool(), ws.testdata, work / f"check-{name}")
        print("after the last edit both tools still pass the release's test vectors", flush=True)
    print(
        f"{args.rounds} rounds ({args.warmup} warm-up), {args.edits} edit(s) per round, "
        f"order reversed every other round:"
    )
    _report(splits, pair)


if __name__ == "__main__":
    raise SystemExit(main())
