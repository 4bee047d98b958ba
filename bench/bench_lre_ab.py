"""Two lre checkouts side by side on the same work: a same-run A/B of lre's CPU.

Changes of a few tenths of a millisecond per action hide in the spread
between runs on a shared machine, so this starts two lre servers at once,
A from one source tree and B from another (``--tree-a``/``--tree-b``: a
checkout each, e.g. ``git worktree add --detach /tmp/ab/OLD <commit>``; the
``lre`` package is taken from the tree through ``PYTHONPATH``, the packages
it needs from this interpreter), each with the bench's own config and home
(``_client.local_config``), and runs the same work on both in alternating
rounds (A then B, B then A, ...). Per side it reports the median over rounds
of lre's CPU (the server process, not its actions) per unit of work and the
split by thread (``/proc/<pid>/task/*``), and B/A.

Workloads (``--work``):

- ``true``: the 42 actions of the recorded Bazel build (bench/_replay.py) with the
  command replaced by ``/bin/true`` on the same input trees, sent as Bazel
  does (FindMissingBlobs of the whole tree, Execute, a Read of the smallest
  output when there is one), 16 in flight;
- ``fresh``: ``/bin/true`` actions each on an input tree no action had
  before (3 directories of 2 files), so every Directory is new and every
  result a new action-cache entry, as in a clean build; with
  ``--executable-inputs`` every file is marked executable, as Bazel 4 marks
  every input (so each action's first staging needs the 0555 copy of each
  of its new blobs);
- ``rpc``: single calls, 1,500 per round with 16 in flight (CPU per call),
  then 300 one at a time (p50 latency): FindMissingBlobs of 30 present
  blobs, a ByteStream Read of a 1.5 KB blob, a GetActionResult miss and a
  one-message ByteStream Write of a new 600-byte blob.

Same code, two configurations: ``--tree-b`` defaults to ``--tree-a``, and
``--override-a KEY=JSON`` / ``--override-b KEY=JSON`` (repeatable) set a
dotted path of the generated config on one side (list items by index, e.g.
``workers.0.local.max_processes=0``; a missing last key is added, a missing
inner one or an index out of range is an error), so a feature's cost can be
isolated in a same-run A/B (feature on vs off).

Raises ``RuntimeError`` when an action fails; ``SystemExit`` (argparse) on a
malformed override.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _client import (
    LreProcess,
    ReapiClient,
    digest_of,
    local_config,
    process_cpu,
    python_path,
    thread_cpu,
)
from _replay import (
    BAZEL_WORKER,
    Plan,
    Recording,
    bazel_metadata,
    cached_recording,
    replay_plans,
    replay_round,
)

from lre.proto import bs_grpc, bs_pb2, re_grpc, re_pb2

BATCH = 42
RPC_KINDS = ("FindMissingBlobs", "Read", "GetActionResult miss", "Write")


def parse_override(text: str) -> tuple[list[str], object]:
    """``KEY=JSON`` as (the dotted key's parts, the decoded value).

    Raises ``argparse.ArgumentTypeError`` without ``=``, with an empty key part,
    or when the value is not JSON."""
    key, sep, value = text.partition("=")
    parts = key.split(".")
    if not sep or not all(parts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=JSON with a dotted KEY")
    try:
        return parts, json.loads(value)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: the value is not JSON ({error})") from None


def apply_overrides(config_text: str, overrides: list[tuple[list[str], object]]) -> str:
    """The config (JSON) with each override's dotted path set to its value.

    Raises ``KeyError`` naming the path when an inner key or list index does
    not exist (a typo would otherwise measure an unchanged config)."""
    config = json.loads(config_text)
    for parts, value in overrides:
        node = config
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            where = ".".join(parts[: depth + 1])
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise KeyError(f"override {'.'.join(parts)}: no list item {where}")
                index: int | str = int(part)
            elif isinstance(node, dict):
                if not last and part not in node:
                    raise KeyError(f"override {'.'.join(parts)}: no key {where}")
                index = part
            else:
                raise KeyError(f"override {'.'.join(parts)}: {where} is not inside a map or list")
            if last:
                node[index] = value
            else:
                node = node[index]
    return json.dumps(config, indent=2)


async def _fresh_plans(client: ReapiClient, count: int, *, executable: bool) -> list[Plan]:
    """``count`` /bin/true actions, each on an input tree of its own (uploaded);
    ``executable``: every file marked executable."""
    command = re_pb2.Command(arguments=["/bin/true"])
    command_bytes = command.SerializeToString()
    command_digest = digest_of(command_bytes)
    blobs = [command_bytes]
    plans = []
    for _ in range(count):
        root = re_pb2.Directory()
        for name in ("include", "src", "tools"):
            sub = re_pb2.Directory()
            for file_name in ("a", "b"):
                data = os.urandom(200)
                blobs.append(data)
                sub.files.add(name=file_name, digest=digest_of(data), is_executable=executable)
            sub_bytes = sub.SerializeToString()
            blobs.append(sub_bytes)
            root.directories.add(name=name, digest=digest_of(sub_bytes))
        root_bytes = root.SerializeToString()
        blobs.append(root_bytes)
        root_digest = digest_of(root_bytes)
        action = re_pb2.Action(command_digest=command_digest, input_root_digest=root_digest)
        action_bytes = action.SerializeToString()
        blobs.append(action_bytes)
        digest = digest_of(action_bytes)
        tree = [digest, command_digest, root_digest]
        plans.append(Plan(digest, tree, bazel_metadata(digest, command)))
    for start in range(0, len(blobs), 500):
        await client.upload(blobs[start : start + 500])
    return plans


def _rpc_calls(
    client: ReapiClient, present: list[re_pb2.Digest]
) -> dict[str, Callable[[], Awaitable[None]]]:
    byte_stream = bs_grpc.ByteStreamStub(client.channel)
    action_cache = re_grpc.ActionCacheStub(client.channel)
    first = present[0]

    async def find_missing() -> None:
        await client.cas.FindMissingBlobs(re_pb2.FindMissingBlobsRequest(blob_digests=present))

    async def read() -> None:
        name = f"blobs/{first.hash}/{first.size_bytes}"
        async for _ in byte_stream.Read(bs_pb2.ReadRequest(resource_name=name)):
            pass

    async def miss() -> None:
        request = re_pb2.GetActionResultRequest(action_digest=digest_of(os.urandom(16)))
        try:
            await action_cache.GetActionResult(request)
        except Exception as error:  # grpc.aio.AioRpcError
            if "NOT_FOUND" not in str(getattr(error, "code", lambda: "")()):
                raise
        else:
            raise RuntimeError("GetActionResult of a random digest found a result")

    async def write() -> None:
        data = os.urandom(600)
        digest = digest_of(data)
        name = f"uploads/{os.urandom(8).hex()}/blobs/{digest.hash}/{digest.size_bytes}"

        async def requests():  # type: ignore[no-untyped-def]
            yield bs_pb2.WriteRequest(resource_name=name, finish_write=True, data=data)

        await byte_stream.Write(requests())

    return dict(zip(RPC_KINDS, (find_missing, read, miss, write), strict=True))


async def _timed(calls: int, inflight: int, fn: Callable[[], Awaitable[None]]) -> None:
    left = iter(range(calls))

    async def loop() -> None:
        for _ in left:
            await fn()

    await asyncio.gather(*(loop() for _ in range(inflight)))


class Side:
    def __init__(self, name: str, lre: LreProcess) -> None:
        self.name = name
        self.lre = lre
        self.client: ReapiClient
        self.per_unit: dict[str, list[float]] = {}
        self.latency: dict[str, list[float]] = {}
        self.threads: dict[str, float] = {}
        self.rate: dict[str, list[float]] = {}

    def cpu(self) -> float:
        return process_cpu(self.lre.proc.pid)[0]

    async def measure(self, key: str, units: int, work: Callable[[], Awaitable[None]]) -> None:
        before, threads = self.cpu(), thread_cpu(self.lre.proc.pid)
        started = time.monotonic()
        await work()
        self.rate.setdefault(key, []).append(units / (time.monotonic() - started))
        self.per_unit.setdefault(key, []).append((self.cpu() - before) / units)
        for tid, (name, seconds) in thread_cpu(self.lre.proc.pid).items():
            start = threads.get(tid, (name, 0.0))[1]
            self.threads[name] = self.threads.get(name, 0.0) + (seconds - start) / units


async def _run(args: argparse.Namespace, sides: list[Side]) -> None:
    # A first run records the build with its own asyncio loop: off this one.
    recording = (
        await asyncio.to_thread(cached_recording, args.recording_cache, 40, 8)
        if args.work == "true"
        else None
    )
    batches: dict[str, Iterator[list[Plan]]] = {}
    calls: dict[str, dict[str, Callable[[], Awaitable[None]]]] = {}
    for side in sides:
        side.client = ReapiClient(side.lre.address)
    try:
        await _measure_all(args, sides, recording, batches, calls)
    finally:
        for side in sides:
            await side.client.close()


async def _measure_all(
    args: argparse.Namespace,
    sides: list[Side],
    recording: Recording | None,
    batches: dict[str, Iterator[list[Plan]]],
    calls: dict[str, dict[str, Callable[[], Awaitable[None]]]],
) -> None:
    for side in sides:
        if recording is not None:
            await recording.upload(side.client)
            plans = (await replay_plans(side.client, [a.action for a in recording.actions]))["true"]
            batches[side.name] = itertools.repeat(plans)
        elif args.work == "fresh":
            size = args.batch
            count = size * args.reps * (args.rounds + 2)
            fresh = await _fresh_plans(side.client, count, executable=args.executable_inputs)
            batches[side.name] = iter([fresh[i : i + size] for i in range(0, len(fresh), size)])
        else:
            present = await side.client.upload([os.urandom(1500) for _ in range(30)])
            calls[side.name] = _rpc_calls(side.client, present)
    for side in sides:  # warm-up
        if args.work == "rpc":
            for fn in calls[side.name].values():
                await _timed(100, 16, fn)
        else:
            for _ in range(2):
                await replay_round(side.client, next(batches[side.name]), args.inflight)
    for number in range(args.rounds):
        for side in sides if number % 2 == 0 else sides[::-1]:
            if args.work == "rpc":
                for kind, fn in calls[side.name].items():
                    await side.measure(kind, args.calls, lambda fn=fn: _timed(args.calls, 16, fn))
                    waits = []
                    for _ in range(300):
                        started = time.perf_counter()
                        await fn()
                        waits.append(time.perf_counter() - started)
                    side.latency.setdefault(kind, []).append(statistics.median(waits))
            else:

                async def rounds(side: Side = side) -> None:
                    for _ in range(args.reps):
                        await replay_round(side.client, next(batches[side.name]), args.inflight)

                units = args.reps * (args.batch if args.work == "fresh" else BATCH)
                await side.measure(args.work, units, rounds)


def _report(args: argparse.Namespace, sides: list[Side]) -> None:
    a = sides[0]
    for key in a.per_unit:
        med = {s.name: statistics.median(s.per_unit[key]) * 1e3 for s in sides}
        unit = "action" if key in ("true", "fresh") else "call"
        ratio = med["B"] / med["A"]
        line = f"{key}: A {med['A']:.3f} ms per {unit}, B {med['B']:.3f} ms, B/A {ratio:.3f}"
        if key in ("true", "fresh"):
            rates = {s.name: statistics.median(s.rate[key]) for s in sides}
            line += f"; throughput A {rates['A']:.0f}/s, B {rates['B']:.0f}/s"
        if key in a.latency:
            lat = {s.name: statistics.median(s.latency[key]) * 1e3 for s in sides}
            line += f"; p50 latency one at a time A {lat['A']:.2f} ms, B {lat['B']:.2f} ms"
        print(line)
        for s in sides:
            print(f"  {s.name} rounds: " + " ".join(f"{x * 1e3:.3f}" for x in s.per_unit[key]))
    units = len(a.per_unit) if args.work == "rpc" else 1
    for s in sides:
        split = sorted(s.threads.items(), key=lambda kv: -kv[1])
        shown = ", ".join(
            f"{name} {seconds / args.rounds / units * 1e3:.2f}"
            for name, seconds in split
            if seconds / args.rounds / units > 2e-5
        )
        print(f"  {s.name} by thread (ms per unit, averaged over the workloads): {shown}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tree-a", type=Path, required=True, help="source tree of side A")
    ap.add_argument("--tree-b", type=Path, help="source tree of side B (default: --tree-a)")
    for side in ("a", "b"):
        ap.add_argument(
            f"--override-{side}",
            type=parse_override,
            action="append",
            default=[],
            metavar="KEY=JSON",
            help=f"set a dotted config path on side {side.upper()}, e.g. "
            "workers.0.local.max_processes=0 (repeatable)",
        )
    ap.add_argument("--work", choices=("true", "fresh", "rpc"), default="true")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=2, help="batches of 42 actions per round")
    ap.add_argument("--inflight", type=int, default=16, help="actions in flight (true, fresh)")
    ap.add_argument("--batch", type=int, default=BATCH, help="actions per batch (fresh)")
    ap.add_argument(
        "--executable-inputs",
        action="store_true",
        help="fresh: mark every input file executable (as Bazel 4 does)",
    )
    ap.add_argument("--calls", type=int, default=1500, help="calls per kind and round (rpc)")
    ap.add_argument("--recording-cache", type=Path, default=Path.home() / ".cache" / "lre-bench")
    args = ap.parse_args()
    if args.tree_b is None:
        args.tree_b = args.tree_a
    started = time.monotonic()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lre-bench-ab.") as tmp:
        sides: list[Side] = []
        try:
            configs = {}
            for name, overrides in (("A", args.override_a), ("B", args.override_b)):
                home = Path(tmp) / name
                configs[name] = apply_overrides(local_config(home, BAZEL_WORKER), overrides)
            for name, tree in (("A", args.tree_a), ("B", args.tree_b)):
                home = Path(tmp) / name
                with python_path(tree):
                    lre = LreProcess(configs[name], home)
                sides.append(Side(name, lre))
            print(f"A = {args.tree_a}, B = {args.tree_b}, work {args.work}")
            for name, overrides in (("A", args.override_a), ("B", args.override_b)):
                for parts, value in overrides:
                    print(f"  {name}: {'.'.join(parts)} = {json.dumps(value)}")
            asyncio.run(_run(args, sides))
            _report(args, sides)
        finally:
            for side in sides:
                side.lre.stop()
    print(f"took {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
