"""Recorded Bazel actions and the calls Bazel 4 makes per remote action (shared by replay benches).

- :func:`record`: one clean Bazel build of the generated C workspace
  (tests/e2e/_workspace.py) through an lre; returns the digests of the
  actions it ran, read from the listing of lre's filesystem action cache
  (``<home>/ac/<xx>/<hash>-<size>``).
- :class:`Recording`: those actions with every blob they reference (Action,
  Command, input directories and files, the smallest output each produced),
  kept on disk by :func:`cached_recording` so a bench that only needs the
  actions runs Bazel once, not on every run; :meth:`Recording.upload` puts it
  into another server.
- :func:`action_tree`: an action's Action, Command and every digest of its
  input tree, read through the CAS API.
- :func:`bazel_metadata` and :func:`bazel_action`: the RequestMetadata header
  and the call sequence Bazel 4 makes for one remote action
  (FindMissingBlobs naming the whole input tree, Execute with
  ``skip_cache_lookup``, a ByteStream Read of the smallest output).
- :func:`replay_plans` and :func:`replay_round`: the recording as plans in
  two variants (as recorded, ``/bin/true`` on the same trees) and one pass of
  them sent as Bazel sends them.

Every function raises ``RuntimeError`` when the build, a blob or an action
does not come back as expected.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _client import LreProcess, ReapiClient, local_config

from lre.cas import FilesystemActionCache
from lre.proto import REQUEST_METADATA_KEY, bs_grpc, bs_pb2, re_grpc, re_pb2
from tests.e2e._bazel import BazelSession
from tests.e2e._workspace import generate_workspace

#: The laptop defaults, plus what the embedded default config adds to its
#: worker for Bazel (OSFamily, the action cache written).
BAZEL_WORKER = {
    "platform_properties": {"OSFamily": {"values": ["Linux", "linux"]}},
    "upload_action_result": {"ac_store": "ac"},
}

Metadata = tuple[tuple[str, bytes], ...]


@dataclass(slots=True)
class Plan:
    """One action to replay: its digest, the digests FindMissingBlobs names,
    the gRPC headers every call for it sends, and the blob read after it
    (None: the smallest output in its result, if any)."""

    action: re_pb2.Digest
    tree: list[re_pb2.Digest]
    metadata: Metadata
    read: re_pb2.Digest | None = None


def bazel_metadata(action: re_pb2.Digest, command: re_pb2.Command) -> Metadata:
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


def blob_key(digest: re_pb2.Digest) -> str:
    return f"{digest.hash}/{digest.size_bytes}"


async def read_blobs(
    client: ReapiClient, digests: list[re_pb2.Digest], metadata: Metadata = ()
) -> list[bytes]:
    """The blobs ``digests`` in order (one BatchReadBlobs per call)."""
    response = await client.cas.BatchReadBlobs(
        re_pb2.BatchReadBlobsRequest(instance_name=client.instance, digests=digests),
        metadata=metadata,
    )
    out = []
    for r in response.responses:
        if r.status.code != 0:
            raise RuntimeError(f"blob {r.digest.hash}: {r.status.message}")
        out.append(r.data)
    return out


async def action_tree(
    client: ReapiClient, key: re_pb2.Digest
) -> tuple[re_pb2.Action, re_pb2.Command, list[re_pb2.Digest]]:
    """The Action ``key``, its Command and the digests of the action, the
    command, the input root and everything below it (directories and files)."""
    (action_bytes,) = await read_blobs(client, [key])
    action = re_pb2.Action.FromString(action_bytes)
    (command_bytes,) = await read_blobs(client, [action.command_digest])
    tree = [key, action.command_digest, action.input_root_digest]
    pending = [action.input_root_digest]
    while pending:
        (data,) = await read_blobs(client, [pending.pop()])
        directory = re_pb2.Directory.FromString(data)
        tree.extend(f.digest for f in directory.files)
        for sub in directory.directories:
            tree.append(sub.digest)
            pending.append(sub.digest)
    return action, re_pb2.Command.FromString(command_bytes), tree


@dataclass(frozen=True, slots=True)
class BazelCall:
    """One action as Bazel sent it: the final response and when (``time.time()``)
    the Execute call was made and its last message arrived."""

    response: re_pb2.ExecuteResponse
    sent: float
    received: float


async def bazel_action(
    client: ReapiClient, byte_stream: bs_grpc.ByteStreamStub, plan: Plan
) -> BazelCall:
    """FindMissingBlobs (nothing may be missing), Execute, then a ByteStream
    Read of ``plan.read`` (or of the result's smallest output), checked
    against its digest. Raises ``RuntimeError`` when a blob is missing, the
    action fails or the read blob differs."""
    missing = await client.cas.FindMissingBlobs(
        re_pb2.FindMissingBlobsRequest(instance_name=client.instance, blob_digests=plan.tree),
        metadata=plan.metadata,
    )
    if missing.missing_blob_digests:
        raise RuntimeError(
            f"action {plan.action.hash}: {len(missing.missing_blob_digests)} blobs missing"
        )
    sent = time.time()
    response = await client.execute(plan.action, plan.metadata)
    received = time.time()
    if response.status.code != 0 or response.result.exit_code != 0:
        raise RuntimeError(f"action {plan.action.hash} failed: {response}")
    read = plan.read
    if read is None:
        outputs = sorted(response.result.output_files, key=lambda o: o.digest.size_bytes)
        read = outputs[0].digest if outputs else None
    if read is not None:
        name = f"{client.instance}/blobs/{read.hash}/{read.size_bytes}".lstrip("/")
        data = b""
        async for chunk in byte_stream.Read(
            bs_pb2.ReadRequest(resource_name=name), metadata=plan.metadata
        ):
            data += chunk.data
        if hashlib.sha256(data).hexdigest() != read.hash or len(data) != read.size_bytes:
            raise RuntimeError(f"action {plan.action.hash}: read blob {read.hash} differs")
    return BazelCall(response, sent, received)


#: The ways :func:`replay_plans` sends the recorded actions: as recorded (gcc
#: runs), as ``/bin/true`` on the same input trees.
VARIANTS = ("build", "true")


def remote_flags(address: str) -> list[str]:
    """The flags ``lre.bazelrc`` gives a Bazel 4 user, with cache lookups off:
    every action of a clean build executes on the server at ``address``."""
    return [
        f"--remote_executor=grpc://{address}",
        "--remote_instance_name=main",
        "--spawn_strategy=remote",
        "--jobs=16",
        "--remote_timeout=300",
        "--remote_default_exec_properties=cpu_count=1",
        "--remote_default_exec_properties=OSFamily=Linux",
        "--remote_download_toplevel",
        "--noremote_accept_cached",
    ]


async def replay_plans(client: ReapiClient, keys: list[re_pb2.Digest]) -> dict[str, list[Plan]]:
    """Per variant of :data:`VARIANTS`, the recorded actions ``keys`` as plans,
    the ``/bin/true`` ones uploaded. Raises ``RuntimeError`` when a blob of a
    recorded action cannot be read."""
    plans: dict[str, list[Plan]] = {v: [] for v in VARIANTS}
    for key in keys:
        action, command, tree = await action_tree(client, key)
        plans["build"].append(Plan(key, tree, bazel_metadata(key, command)))
        del command.arguments[:]
        command.arguments.append("/bin/true")
        (true_command,) = await client.upload([command.SerializeToString()])
        changed = re_pb2.Action()
        changed.CopyFrom(action)
        changed.command_digest.CopyFrom(true_command)
        (digest,) = await client.upload([changed.SerializeToString()])
        root = action.input_root_digest
        plans["true"].append(
            Plan(digest, [digest, true_command, root, *tree[3:]], bazel_metadata(digest, command))
        )
    return plans


async def replay_round(client: ReapiClient, plans: list[Plan], inflight: int) -> None:
    """Send every plan the way Bazel does, ``inflight`` at a time (asyncio).
    Raises ``RuntimeError`` as :func:`bazel_action` does."""
    byte_stream = bs_grpc.ByteStreamStub(client.channel)
    queue = iter(plans)

    async def loop() -> None:
        for plan in queue:
            await bazel_action(client, byte_stream, plan)

    await asyncio.gather(*(loop() for _ in range(inflight)))


def record(
    lre: LreProcess, home: Path, work: Path, modules: int, funcs: int
) -> list[re_pb2.Digest]:
    """Build the generated workspace with Bazel through ``lre`` (whose home is
    ``home``) and return the digests of the actions it ran, read from the
    filesystem action cache (its log, read while lre runs). Raises
    ``RuntimeError`` if a spawn ran locally or a result is missing."""
    ws = generate_workspace(work / "ws", modules=modules, funcs=funcs)
    with BazelSession(ws.root, work / "bazel-root") as bazel:
        summary = bazel.build([ws.target], remote_flags(lre.address)).check()
        if summary.count("remote") != summary.spawns:
            raise RuntimeError(f"not every spawn ran remotely: {summary}")
    stored = trio.run(FilesystemActionCache(home / "ac").digests)
    keys = [d.to_proto() for d in stored]
    print(f"recorded {len(keys)} actions ({summary.spawns} spawns in the build)")
    if len(keys) != summary.spawns:
        raise RuntimeError(f"{len(keys)} results in lre's action cache, {summary.spawns} spawns")
    return keys


@dataclass(frozen=True, slots=True)
class RecordedAction:
    """An action of the recording and the smallest output its run produced
    (None when it produced no file)."""

    action: re_pb2.Digest
    smallest_output: re_pb2.Digest | None


@dataclass(frozen=True, slots=True)
class Recording:
    """Recorded actions and every blob they reference, by ``hash/size``."""

    actions: list[RecordedAction]
    blobs: dict[str, bytes]

    async def upload(self, client: ReapiClient) -> None:
        """Put every blob into ``client``'s server (BatchUpdateBlobs)."""
        await client.upload(list(self.blobs.values()))

    def save(self, path: Path) -> None:
        """Write to the directory ``path``: ``manifest.json`` and ``blobs/<hash>``."""
        (path / "blobs").mkdir(parents=True, exist_ok=True)
        for data in self.blobs.values():
            (path / "blobs" / hashlib.sha256(data).hexdigest()).write_bytes(data)
        manifest = [
            {
                "action": blob_key(a.action),
                "output": blob_key(a.smallest_output) if a.smallest_output else None,
            }
            for a in self.actions
        ]
        (path / "manifest.json").write_text(json.dumps(manifest, indent=1))

    @classmethod
    def load(cls, path: Path) -> Recording:
        """Read what :meth:`save` wrote; ``RuntimeError`` if a blob is damaged."""
        blobs = {}
        for file in (path / "blobs").iterdir():
            data = file.read_bytes()
            if hashlib.sha256(data).hexdigest() != file.name:
                raise RuntimeError(f"recording {path}: blob {file.name} is damaged")
            blobs[f"{file.name}/{len(data)}"] = data

        def digest(key: str) -> re_pb2.Digest:
            digest_hash, size = key.split("/")
            return re_pb2.Digest(hash=digest_hash, size_bytes=int(size))

        actions = [
            RecordedAction(digest(a["action"]), digest(a["output"]) if a["output"] else None)
            for a in json.loads((path / "manifest.json").read_text())
        ]
        return cls(actions, blobs)


async def capture(client: ReapiClient, keys: list[re_pb2.Digest]) -> Recording:
    """The Recording of the actions ``keys`` as ``client``'s server holds them."""
    action_cache = re_grpc.ActionCacheStub(client.channel)
    wanted: dict[str, re_pb2.Digest] = {}
    actions = []
    for key in keys:
        _, _, tree = await action_tree(client, key)
        result = await action_cache.GetActionResult(
            re_pb2.GetActionResultRequest(instance_name=client.instance, action_digest=key)
        )
        outputs = sorted(result.output_files, key=lambda o: o.digest.size_bytes)
        smallest = outputs[0].digest if outputs else None
        for digest in [*tree, *([smallest] if smallest else [])]:
            wanted[blob_key(digest)] = digest
        actions.append(RecordedAction(key, smallest))
    blobs: dict[str, bytes] = {}
    listed = [d for d in wanted.values() if d.size_bytes > 0]
    for start in range(0, len(listed), 200):
        chunk = listed[start : start + 200]
        for digest, data in zip(chunk, await read_blobs(client, chunk), strict=True):
            blobs[blob_key(digest)] = data
    return Recording(actions, blobs)


def cached_recording(cache: Path, modules: int, funcs: int) -> Recording:
    """The recording of the workspace ``modules`` x ``funcs``, from
    ``cache`` if an earlier run left it there (keyed by the workspace
    generator's source, so a changed workspace is recorded again), else made
    now with Bazel and an lre of its own (about a minute) and saved there."""
    generator = Path(__file__).resolve().parent.parent / "tests" / "e2e" / "_workspace.py"
    version = hashlib.sha256(generator.read_bytes()).hexdigest()[:12]
    path = cache / f"replay-m{modules}-f{funcs}-{version}"
    if (path / "manifest.json").exists():
        recording = Recording.load(path)
        print(f"recording: {len(recording.actions)} actions from {path}")
        return recording
    import asyncio

    with tempfile.TemporaryDirectory(prefix="lre-bench-record.") as tmp:
        work = Path(tmp)
        home = work / "lre"
        with LreProcess(local_config(home, BAZEL_WORKER), home) as lre:
            keys = record(lre, home, work, modules, funcs)

            async def fetch() -> Recording:
                client = ReapiClient(lre.address)
                try:
                    return await capture(client, keys)
                finally:
                    await client.close()

            recording = asyncio.run(fetch())
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    recording.save(partial)
    partial.rename(path)
    print(f"recording: {len(recording.actions)} actions saved to {path}")
    return recording
