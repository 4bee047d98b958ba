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
from bench_bazel_ab import remote_flags

from lre.proto import bs_grpc, bs_pb2, re_pb2
from lre.service import REQUEST_METADATA_KEY
from tests.e2e._bazel import BazelSession
from tests.e2e._workspace import generate_workspace

VARIANTS = ("build", "true", "true-empty")


class Plan:
    """One action to replay: its digest, the digests FindMissingBlobs names
    and the gRPC headers every call for it sends."""

    def __init__(
        self,
        action: re_pb2.Digest,
        tree: list[re_pb2.Digest],
        metadata: tuple[tuple[str, bytes], ...],
    ) -> None:
        self.action = action
        self.tree = tree
        self.metadata = metadata


def _bazel_metadata(
    action: re_pb2.Digest, command: re_pb2.Command
) -> tuple[tuple[str, bytes], ...]:
    """The RequestMetadata header Bazel 4 sends with every call for an action
    (mnemonic and target guessed from the command: compile or link, and the
    package of its first output)."""
    outputs = list(command.output_paths) or list(command.output_files)
    package = outputs[0].split("/bin/", 1)[-1].split("/", 1)[0] if outputs else "pkg"
    meta = re_pb2.RequestMetadata(
        tool_details=re_pb2.ToolDetails(tool_name="bazel", tool_version="4.2.3"),
        action_id=action.hash,
        tool_invocation_id="replay",
        correlated_invocations_id="replay",
        action_mnemonic="CppCompile" if "-c" in command.arguments else "CppLink",
        target_id=f"//{package}:{package}",
        configuration_id="k8-fastbuild",
    )
    return ((REQUEST_METADATA_KEY, meta.SerializeToString()),)


async def _read_blobs(client: ReapiClient, digests: list[re_pb2.Digest]) -> list[bytes]:
    response = await client.cas.BatchReadBlobs(
        re_pb2.BatchReadBlobsRequest(instance_name=client.instance, digests=digests)
    )
    out = []
    for r in response.responses:
        if r.status.code != 0:
            raise RuntimeError(f"blob {r.digest.hash}: {r.status.message}")
        out.append(r.data)
    return out


async def _plans(client: ReapiClient, keys: list[re_pb2.Digest]) -> dict[str, list[Plan]]:
    """The recorded actions and the two /bin/true variants of them (uploaded)."""
    plans: dict[str, list[Plan]] = {v: [] for v in VARIANTS}
    empty_root = (await client.upload([re_pb2.Directory().SerializeToString()]))[0]
    for key in keys:
        (action_bytes,) = await _read_blobs(client, [key])
        action = re_pb2.Action.FromString(action_bytes)
        (command_bytes,) = await _read_blobs(client, [action.command_digest])
        tree = [key, action.command_digest, action.input_root_digest]
        pending = [action.input_root_digest]
        while pending:
            (data,) = await _read_blobs(client, [pending.pop()])
            directory = re_pb2.Directory.FromString(data)
            tree.extend(f.digest for f in directory.files)
            for sub in directory.directories:
                tree.append(sub.digest)
                pending.append(sub.digest)
        command = re_pb2.Command.FromString(command_bytes)
        metadata = _bazel_metadata(key, command)
        plans["build"].append(Plan(key, tree, metadata))
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
                Plan(digest, [digest, true_command, root, *names], _bazel_metadata(digest, command))
            )
    return plans


async def _round(client: ReapiClient, plans: list[Plan], inflight: int) -> None:
    byte_stream = bs_grpc.ByteStreamStub(client.channel)
    queue = iter(plans)

    async def loop() -> None:
        for plan in queue:
            await client.cas.FindMissingBlobs(
                re_pb2.FindMissingBlobsRequest(
                    instance_name=client.instance, blob_digests=plan.tree
                ),
                metadata=plan.metadata,
            )
            response = await client.execute(plan.action, plan.metadata)
            if response.status.code != 0 or response.result.exit_code != 0:
                raise RuntimeError(f"action {plan.action.hash} failed: {response}")
            outputs = sorted(response.result.output_files, key=lambda o: o.digest.size_bytes)
            if outputs:
                d = outputs[0].digest
                name = f"{client.instance}/blobs/{d.hash}/{d.size_bytes}".lstrip("/")
                read = byte_stream.Read(
                    bs_pb2.ReadRequest(resource_name=name), metadata=plan.metadata
                )
                async for _ in read:
                    pass

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


def record(
    lre: LreProcess, home: Path, work: Path, modules: int, funcs: int
) -> list[re_pb2.Digest]:
    """Build the generated workspace with Bazel through ``lre`` (whose home is
    ``home``) and return the digests of the actions it ran, read from the
    filesystem action cache. Raises ``RuntimeError`` if a spawn ran locally."""
    ws = generate_workspace(work / "ws", modules=modules, funcs=funcs)
    with BazelSession(ws.root, work / "bazel-root") as bazel:
        summary = bazel.build([ws.target], remote_flags(lre.address)).check()
        if summary.count("remote") != summary.spawns:
            raise RuntimeError(f"not every spawn ran remotely: {summary}")
    keys = []
    for path in sorted((home / "ac").glob("*/*")):
        digest_hash, _, size = path.name.rpartition("-")
        keys.append(re_pb2.Digest(hash=digest_hash, size_bytes=int(size)))
    print(f"recorded {len(keys)} actions ({summary.spawns} spawns in the build)")
    return keys


#: The laptop defaults, plus what the embedded default config adds to its
#: worker for Bazel (OSFamily, the action cache written).
BAZEL_WORKER = {
    "platform_properties": {"OSFamily": {"values": ["Linux", "linux"]}},
    "upload_action_result": {"ac_store": "ac"},
}


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
