"""One recorded compile of the edit loop run alone, the same way each time
but in different places, in alternating rounds (issue 33, step 1a).

    .venv/bin/python bench/bench_command_alone.py [--rounds 20] [--warmup 2] \\
        [--modules 40] [--funcs 8] [--module 7] [--make-ws ../shared/tools/peer/make_ws.py] \\
        [--modes host,sandbox,lre-view,...]

What it does:

- generates the edit loop's workspace with the peer harness's ``make_ws.py``,
  builds ``//:app`` once with Bazel through an lre of its own (the bench
  config of ``_client.local_config`` with the Bazel worker settings of
  ``_replay``) and takes from that lre the Action, Command and input tree of
  the compile of ``src/mod_NN.c`` (``--module``), byte for byte;
- writes that input tree into a directory once (files with their executable
  bit, the output directories made), the execroot the host modes run in;
- starts one more lre per lre mode (configs differing in one worker field
  each) and uploads the recorded blobs into each;
- per round runs the compile once in every mode, the order rotated every
  round, and records per run its wall time and CPU (user + system of the
  whole process tree: ``wait4`` for the host modes, the result's
  ``lre.v1.ResourceUsage`` for lre's, which is the rusage of the action's
  first process and everything it reaped).

Modes (``--modes``, comma separated, all by default):

- ``host``: ``subprocess`` runs argv with the Command's environment in the
  directory (nice 0, as Bazel's local strategy does); ``host-again`` the same
  a second time per round (the A/A: how far two identical modes differ);
- ``host-nice5``: the same at niceness 5 (lre's default ``nice`` for actions);
- ``sandbox``: Bazel's own ``linux-sandbox`` binary around argv, with the
  flags Bazel 4.2.3's sandboxed strategy passes for such a spawn (``-W`` the
  execroot, ``-t`` kill delay, ``-w`` execroot, /tmp and /dev/shm, ``-S``);
- ``lre-view``: Execute against lre's defaults (containment strongest =
  pidns as root, sandbox_view true, nice 5); ``lre-noview``: sandbox_view
  false; ``lre-portable``: containment portable; ``lre-view-nice0``: the
  defaults with nice 0. For lre modes two times are recorded: lre's own
  ``execution_start`` -> ``execution_completed`` (spawn + run + reap, the
  counterpart of the host's wall) and the Execute call as this client saw it.

Prints every round, then per mode the medians, the ratio to ``host`` and the
per-round ratios' spread. Exits 1 (with the reason) when the build, the
recording, a run or an Execute fails, or a mode's output differs from the
recorded one.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _client import LreProcess, ReapiClient, local_config
from _replay import BAZEL_WORKER, Recording, action_tree, capture
from bench_bazel_ab import remote_flags
from bench_edit_split import find_make_ws, make_workspace

from lre.cas import FilesystemActionCache
from lre.proto import lre_pb2, re_pb2
from tests.e2e._bazel import BazelSession

#: Bazel 4.2.3's sandboxed strategy's linux-sandbox (Debian's bazel-bootstrap).
LINUX_SANDBOX = Path("/usr/libexec/x86_64-linux-gnu/bazel/linux-sandbox")

#: lre mode -> the worker fields its config sets beyond the bench defaults.
LRE_MODES: dict[str, dict[str, object]] = {
    "lre-view": {},
    "lre-noview": {"sandbox_view": False},
    "lre-portable": {"containment": "portable"},
    "lre-view-nice0": {"nice": 0},
}
HOST_MODES = ("host", "host-again", "host-nice5", "sandbox")
ALL_MODES = (*HOST_MODES, *LRE_MODES)


class BenchError(Exception):
    """The recording or a run did not go the way the bench needs."""


@dataclass
class Sample:
    """One mode's runs: wall (the command as its runner saw it) and CPU, s."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    #: lre modes: the Execute call as the client saw it
    call: list[float] = field(default_factory=list)


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def record_compile(work: Path, make_ws: Path, args: argparse.Namespace) -> tuple[Recording, str]:
    """Build the workspace through a recording lre; returns the Recording of
    the compile of ``src/mod_NN.c`` and the digest of the object it made."""
    ws = work / "ws"
    make_workspace(make_ws, ws, args.modules, args.funcs)
    home = work / "record"
    with LreProcess(local_config(home, BAZEL_WORKER), home) as lre:
        with BazelSession(ws, work / "bazel-record") as bazel:
            summary = bazel.build(["//:app"], remote_flags(lre.address)).check()
            if summary.count("remote") != summary.spawns:
                raise BenchError(f"not every spawn ran remotely: {summary}")
        import trio

        keys = [d.to_proto() for d in trio.run(FilesystemActionCache(home / "ac").digests)]

        async def pick() -> tuple[Recording, str]:
            client = ReapiClient(lre.address)
            try:
                stem = f"/mod_{args.module:02d}"
                wanted = (f"{stem}.o", f"{stem}.pic.o")
                for key in keys:
                    _, command, _ = await action_tree(client, key)
                    outputs = [*command.output_paths, *command.output_files]
                    if any(o.endswith(wanted) for o in outputs):
                        recording = await capture(client, [key])
                        out = recording.actions[0].smallest_output
                        result = await _action_result(client, key)
                        objects = [f for f in result.output_files if f.path.endswith(wanted)]
                        if out is None or not objects:
                            raise BenchError("the recorded compile has no object output")
                        return recording, objects[0].digest.hash
                raise BenchError(f"no recorded action writes {wanted[0]}")
            finally:
                await client.close()

        return asyncio.run(pick())


async def _action_result(client: ReapiClient, key: re_pb2.Digest) -> re_pb2.ActionResult:
    from lre.proto import re_grpc

    return await re_grpc.ActionCacheStub(client.channel).GetActionResult(
        re_pb2.GetActionResultRequest(instance_name=client.instance, action_digest=key)
    )


def _blob(recording: Recording, digest: re_pb2.Digest) -> bytes:
    if digest.size_bytes == 0:
        return b""
    return recording.blobs[f"{digest.hash}/{digest.size_bytes}"]


def write_execroot(recording: Recording, root: Path) -> tuple[re_pb2.Command, list[Path]]:
    """The recorded input tree under ``root`` and the Command; returns it and
    the output paths (their directories made)."""
    action = re_pb2.Action.FromString(_blob(recording, recording.actions[0].action))
    command = re_pb2.Command.FromString(_blob(recording, action.command_digest))
    pending = [(root, action.input_root_digest)]
    while pending:
        path, digest = pending.pop()
        path.mkdir(parents=True, exist_ok=True)
        directory = re_pb2.Directory.FromString(_blob(recording, digest))
        for f in directory.files:
            (path / f.name).write_bytes(_blob(recording, f.digest))
            (path / f.name).chmod(0o755 if f.is_executable else 0o644)
        pending += [(path / d.name, d.digest) for d in directory.directories]
    outputs = [root / o for o in [*command.output_paths, *command.output_files]]
    for out in outputs:
        out.parent.mkdir(parents=True, exist_ok=True)
    return command, outputs


def _run_host(argv: list[str], cwd: Path, env: dict[str, str], nice: int) -> tuple[float, float]:
    """Run ``argv``; returns (wall, CPU of the whole tree). Raises BenchError on failure."""
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=(lambda: os.nice(nice)) if nice else None,
    )
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise BenchError(f"{argv[0]} exited {proc.returncode}: {output.decode(errors='replace')}")
    return wall, usage.ru_utime + usage.ru_stime


def _seconds(stamp: object) -> float:
    return stamp.seconds + stamp.nanos / 1e9  # type: ignore[attr-defined]


async def _run_lre(
    client: ReapiClient, key: re_pb2.Digest, want: str
) -> tuple[float, float, float]:
    """Execute ``key``; returns (spawn + run + reap, CPU, Execute call)."""
    started = time.monotonic()
    response = await client.execute(key)
    call = time.monotonic() - started
    result = response.result
    if response.status.code != 0 or result.exit_code != 0:
        raise BenchError(f"Execute failed: {response.status} exit {result.exit_code}")
    if not any(f.digest.hash == want for f in result.output_files):
        raise BenchError("lre's object differs from the recorded one")
    m = result.execution_metadata
    usage = lre_pb2.ResourceUsage()
    for extra in m.auxiliary_metadata:
        if extra.Is(lre_pb2.ResourceUsage.DESCRIPTOR):
            extra.Unpack(usage)
    run = _seconds(m.execution_completed_timestamp) - _seconds(m.execution_start_timestamp)
    return run, usage.cpu_time.ToNanoseconds() / 1e9, call


def _check_object(outputs: list[Path], want: str) -> None:
    objects = [o for o in outputs if o.suffix == ".o"]
    if not objects or hashlib.sha256(objects[0].read_bytes()).hexdigest() != want:
        raise BenchError("the host's object differs from the recorded one")


async def _bench(args: argparse.Namespace, work: Path) -> dict[str, Sample]:
    make_ws = find_make_ws(args.make_ws)
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(ALL_MODES)
    if unknown:
        raise BenchError(f"unknown modes {sorted(unknown)}; known: {', '.join(ALL_MODES)}")
    recording, want = await asyncio.to_thread(record_compile, work, make_ws, args)
    execroot = work / "execroot"
    command, outputs = write_execroot(recording, execroot)
    argv = list(command.arguments)
    env = {v.name: v.value for v in command.environment_variables}
    print(f"the compile: {' '.join(argv)}")
    print(f"its environment: {env}")
    stats = work / "sandbox.stats"
    sandboxed = [
        str(LINUX_SANDBOX), "-W", str(execroot), "-t", "15", "-w", str(execroot),
        "-w", "/tmp", "-w", "/dev/shm", "-S", str(stats), "--", *argv,
    ]  # fmt: skip
    servers: dict[str, LreProcess] = {}
    clients: dict[str, ReapiClient] = {}
    key = recording.actions[0].action
    try:
        for mode in modes:
            if mode in LRE_MODES:
                home = work / mode
                worker = {**BAZEL_WORKER, **LRE_MODES[mode]}
                servers[mode] = await asyncio.to_thread(
                    LreProcess, local_config(home, worker), home
                )
                clients[mode] = ReapiClient(servers[mode].address)
                await recording.upload(clients[mode])
        samples = {mode: Sample() for mode in modes}
        for round_ in range(args.warmup + args.rounds):
            order = modes[round_ % len(modes) :] + modes[: round_ % len(modes)]
            line = []
            for mode in order:
                for out in outputs:
                    out.unlink(missing_ok=True)
                if mode in LRE_MODES:
                    wall, cpu, call = await _run_lre(clients[mode], key, want)
                else:
                    nice = 5 if mode == "host-nice5" else 0
                    wall, cpu = _run_host(
                        sandboxed if mode == "sandbox" else argv, execroot, env, nice
                    )
                    _check_object(outputs, want)
                    call = wall
                if round_ >= args.warmup:
                    samples[mode].wall.append(wall)
                    samples[mode].cpu.append(cpu)
                    samples[mode].call.append(call)
                line.append(f"{mode} {1000 * wall:.0f}/{1000 * cpu:.0f}")
            label = f"round {round_ - args.warmup + 1}" if round_ >= args.warmup else "warm-up"
            print(f"{label}: {', '.join(line)} (ms wall/CPU)", flush=True)
        return samples
    finally:
        for client in clients.values():
            await client.close()
        for server in servers.values():
            server.stop()


def _spread(values: list[float], base: list[float]) -> str:
    per = sorted(a / b for a, b in zip(values, base, strict=True))
    return f"{_median(per):.3f} [{per[0]:.2f}-{per[-1]:.2f}]"


def _report(samples: dict[str, Sample]) -> None:
    """Per mode: medians, and the per-round ratios to ``host`` (wall, CPU)."""
    base = samples.get("host")
    print(
        f"{'mode':<16}{'wall ms':>9}{'CPU ms':>9}{'call ms':>9}"
        f"{'wall/host per round':>26}{'CPU/host per round':>26}"
    )
    for mode, s in samples.items():
        walls = cpus = ""
        if base is not None:
            walls, cpus = _spread(s.wall, base.wall), _spread(s.cpu, base.cpu)
        print(
            f"{mode:<16}{1000 * _median(s.wall):>9.1f}{1000 * _median(s.cpu):>9.1f}"
            f"{1000 * _median(s.call):>9.1f}{walls:>26}{cpus:>26}"
        )
    print("(ratio: median of the per-round ratios [min-max]; host-again against host is the A/A)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds (default 20)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds (default 2)")
    parser.add_argument("--modules", type=int, default=40)
    parser.add_argument("--funcs", type=int, default=8)
    parser.add_argument("--module", type=int, default=7, help="the module compiled (default 7)")
    parser.add_argument("--make-ws", type=Path, default=None)
    parser.add_argument("--modes", default=",".join(ALL_MODES))
    args = parser.parse_args()
    if "sandbox" in args.modes.split(",") and not LINUX_SANDBOX.exists():
        print(f"FAILED: {LINUX_SANDBOX} is missing (Bazel 4.2.3's sandbox)", file=sys.stderr)
        return 1
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lre-bench-command-alone-") as tmp:
        try:
            samples = asyncio.run(_bench(args, Path(tmp)))
        except (BenchError, RuntimeError, subprocess.CalledProcessError) as error:
            print(f"FAILED: {error}", file=sys.stderr, flush=True)
            return 1
        finally:
            print(f"took {time.monotonic() - started:.0f} s", flush=True)
    print(f"{args.rounds} rounds ({args.warmup} warm-up), mode order rotated every round:")
    _report(samples)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
