"""lre's own CPU per action on a real build's actions, with Bazel out of the loop.

A clean Bazel build takes ~5 s here and its JVM's CPU varies by up to 2x from
one build to the next, which hides differences of a few ms per action in
lre. This bench records the actions of one build of the generated C
workspace (tests/e2e/_workspace.py) through an lre, then sends them again
itself, the way Bazel does: per action a FindMissingBlobs naming the whole
input tree, an Execute with ``skip_cache_lookup`` and a ByteStream Read of
the smallest output (the ``.d`` file for a compile), each call carrying a
RequestMetadata header like Bazel's (tool, action id, mnemonic, target). It reports lre's CPU
(the server process, not its actions) per action, in three variants, each
round running all three in turn (order reversed every other round):

- ``build``: the recorded actions as they are (gcc runs);
- ``true``: the same input trees, the command replaced by ``/bin/true``;
- ``true-empty``: ``/bin/true`` with an empty input root.

``true`` minus ``true-empty`` is what staging and checking an input tree
costs; ``build`` minus ``true`` is what a real compile adds (outputs, longer
running actions, the sampler, compilers competing for the cores).

The action digests are read from the listing of lre's action cache directory
(``<home>/ac/<xx>/<hash>-<size>``, the filesystem store's layout); every blob
is fetched through the CAS API. Raises ``RuntimeError`` when the build or a
replayed action fails.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _client import LreProcess, ReapiClient, local_config
from _replay import BAZEL_WORKER, Plan, action_tree, bazel_action, bazel_metadata, record

from lre.proto import bs_grpc, re_pb2

VARIANTS = ("build", "true", "true-empty")


async def _plans(client: ReapiClient, keys: list[re_pb2.Digest]) -> dict[str, list[Plan]]:
    """The recorded actions and the two /bin/true variants of them (uploaded)."""
    plans: dict[str, list[Plan]] = {v: [] for v in VARIANTS}
    empty_root = (await client.upload([re_pb2.Directory().SerializeToString()]))[0]
    for key in keys:
        action, command, tree = await action_tree(client, key)
        plans["build"].append(Plan(key, tree, bazel_metadata(key, command)))
        del command.arguments[:]
        command.arguments.append("/bin/true")
        (true_command,) = await client.upload([command.SerializeToString()])
        for variant, root in (("true", action.input_root_digest), ("true-empty", empty_root)):
            changed = re_pb2.Action()
            changed.CopyFrom(action)
            changed.command_digest.CopyFrom(true_command)
            changed.input_root_digest.CopyFrom(root)
            (digest,) = await client.upload([changed.SerializeToString()])
            names = tree[3:] if variant == "true" else []
            plans[variant].append(
                Plan(digest, [digest, true_command, root, *names], bazel_metadata(digest, command))
            )
    return plans


async def _round(client: ReapiClient, plans: list[Plan], inflight: int) -> None:
    byte_stream = bs_grpc.ByteStreamStub(client.channel)
    queue = iter(plans)

    async def loop() -> None:
        for plan in queue:
            await bazel_action(client, byte_stream, plan)

    await asyncio.gather(*(loop() for _ in range(inflight)))


Samples = dict[str, list[float]]


async def _replay(
    address: str, keys: list[re_pb2.Digest], args: argparse.Namespace, pid: int
) -> tuple[Samples, Samples, Samples]:
    client = ReapiClient(address)
    server = psutil.Process(pid)
    try:
        plans = await _plans(client, keys)
        for variant in VARIANTS:  # warm-up: every action once
            await _round(client, plans[variant], args.inflight)
        own: Samples = {v: [] for v in VARIANTS}
        children: Samples = {v: [] for v in VARIANTS}
        walls: Samples = {v: [] for v in VARIANTS}
        for r in range(args.rounds):
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                before, started = server.cpu_times(), time.monotonic()
                await _round(client, plans[variant], args.inflight)
                after, wall = server.cpu_times(), time.monotonic() - started
                n = len(plans[variant])
                own[variant].append((after.user + after.system - before.user - before.system) / n)
                children[variant].append(
                    (
                        after.children_user
                        + after.children_system
                        - before.children_user
                        - before.children_system
                    )
                    / n
                )
                walls[variant].append(wall)
            print(
                f"round {r + 1}: " + ", ".join(f"{v} {own[v][-1] * 1000:.1f} ms" for v in VARIANTS),
                flush=True,
            )
        return own, children, walls
    finally:
        await client.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8, help="timed rounds (default 8)")
    ap.add_argument("--inflight", type=int, default=16, help="actions in flight (Bazel's --jobs)")
    ap.add_argument("--modules", type=int, default=40)
    ap.add_argument("--funcs", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lre-bench-replay.") as tmp:
        work = Path(tmp)
        home = work / "lre"
        with LreProcess(local_config(home, BAZEL_WORKER), home) as lre:
            keys = record(lre, home, work, args.modules, args.funcs)
            own, children, walls = asyncio.run(_replay(lre.address, keys, args, lre.proc.pid))
    med = {v: statistics.median(own[v]) * 1000 for v in VARIANTS}
    for v in VARIANTS:
        print(
            f"{v}: lre {med[v]:.2f} ms CPU per action (min {min(own[v]) * 1000:.2f}), "
            f"its processes {statistics.median(children[v]) * 1000:.1f} ms, "
            f"{statistics.median(walls[v]):.2f} s per round of {len(keys)}"
        )
    print(f"input tree (true - true-empty): {med['true'] - med['true-empty']:+.2f} ms per action")
    print(f"real compile (build - true): {med['build'] - med['true']:+.2f} ms per action")
    return 0


if __name__ == "__main__":
    sys.exit(main())
