"""Helpers of the full-stack client tests: a whole lre in a thread of its
own and a synchronous REAPI client that talks to it the way Bazel and Buck2 do.

One Application serves a whole test module: it runs in its own thread with its
own ``trio.run`` (pytest-trio gives every test a fresh Trio run, so an async
fixture cannot outlive one test). The tests themselves are plain synchronous
functions that use blocking grpc stubs, exactly like an external client.
Every test salts its actions (``Action.salt``) so the shared action cache and
the dedup table never connect two tests.

If the server thread fails to start, the fixture raises what it raised; if it
does not stop within a minute the fixture fails the module's teardown.
"""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
import trio
from google.longrunning import operations_pb2_grpc
from google.protobuf import duration_pb2

from lre.app import Application, ReadyInfo
from lre.config import load_config_text, resolve
from lre.proto import (
    bs_grpc,
    bs_pb2,
    error_details_pb2,
    operations_pb2,
    re_grpc,
    re_pb2,
    status_pb2,
)
from tests.app.conftest import app_config_text

#: The instance name every request uses (Buck2's examples use "main").
INSTANCE = "main"

#: Worker properties of the module's server: the embedded default config's
#: OSFamily spellings, 2 CPUs (from ``app_config_text``).
WORKER_EXTRA = ', platform_properties: { OSFamily: { values: ["Linux", "linux"] } }'

Stage = re_pb2.ExecutionStage


# ------------------------------------------------------------------ the server


class ServerThread:
    """An Application running in a thread of its own until :meth:`stop`."""

    def __init__(self, root: Path, config_text: str | None = None) -> None:
        """``config_text`` defaults to ``app_config_text(root)`` with ``WORKER_EXTRA``."""
        text = config_text or app_config_text(root, max_inflight=2, extra_worker=WORKER_EXTRA)
        self.root = root
        self.app = Application(resolve(load_config_text(text, source="integration.json5")))
        self._started: queue.Queue[ReadyInfo | BaseException] = queue.Queue()
        self._token: trio.lowlevel.TrioToken | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="lre-app", daemon=True)
        self.ready: ReadyInfo | None = None

    def start(self) -> ReadyInfo:
        """Start the thread; the bound addresses once the server listens."""
        self._thread.start()
        started = self._started.get(timeout=60)
        if isinstance(started, BaseException):
            raise started
        self.ready = started
        return started

    def stop(self) -> None:
        if self._token is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self.app.request_stop, trio_token=self._token)
        self._thread.join(60)
        assert not self._thread.is_alive(), "the Application did not stop within 60 s"
        if self._error is not None:
            raise self._error

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as error:  # reported to the fixture, in either phase
            self._error = error
            self._started.put(error)

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            ready: ReadyInfo = await nursery.start(_serve_app, self.app)
            self._started.put(ready)
            await self.app.stopped.wait()


async def _serve_app(app: Application, *, task_status: trio.TaskStatus[ReadyInfo]) -> None:
    await app.serve(task_status=task_status)


# ------------------------------------------------------------------ digests and trees


def digest(data: bytes) -> re_pb2.Digest:
    """SHA-256 digest computed by the client itself (not by lre)."""
    return re_pb2.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def subject(d: re_pb2.Digest) -> str:
    return f"blobs/{d.hash}/{d.size_bytes}"


@dataclass(frozen=True)
class File:
    content: bytes
    executable: bool = False


@dataclass(frozen=True)
class Link:
    target: str


#: Input tree description: "dir/sub/name" -> content. ``None`` is an empty directory.
TreeSpec = Mapping[str, "bytes | File | Link | None"]


def build_tree(spec: TreeSpec) -> tuple[re_pb2.Digest, list[bytes]]:
    """The root Directory digest of ``spec`` and every blob it needs
    (file contents and Directory messages), sorted as REAPI requires."""
    nested: dict[str, Any] = {}
    for path, entry in spec.items():
        parts = path.split("/")
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if entry is None:
            node.setdefault(parts[-1], {})
        else:
            node[parts[-1]] = entry
    blobs: list[bytes] = []

    def encode(node: Mapping[str, Any]) -> re_pb2.Digest:
        directory = re_pb2.Directory()
        for name in sorted(node):
            entry = node[name]
            if isinstance(entry, dict):
                directory.directories.add(name=name, digest=encode(entry))
            elif isinstance(entry, Link):
                directory.symlinks.add(name=name, target=entry.target)
            else:
                file = entry if isinstance(entry, File) else File(entry)
                blobs.append(file.content)
                directory.files.add(
                    name=name, digest=digest(file.content), is_executable=file.executable
                )
        data = directory.SerializeToString()
        blobs.append(data)
        return digest(data)

    return encode(nested), blobs


def tree_files(tree: re_pb2.Tree) -> dict[str, re_pb2.FileNode]:
    """Every file of a ``Tree`` by its path relative to the tree's root."""
    children = {digest(child.SerializeToString()).hash: child for child in tree.children}
    found: dict[str, re_pb2.FileNode] = {}

    def walk(directory: re_pb2.Directory, prefix: str) -> None:
        for file in directory.files:
            found[prefix + file.name] = file
        for sub in directory.directories:
            walk(children[sub.digest.hash], f"{prefix}{sub.name}/")

    walk(tree.root, "")
    return found


# ------------------------------------------------------------------ operations


def metadata_of(operation: operations_pb2.Operation) -> re_pb2.ExecuteOperationMetadata:
    metadata = re_pb2.ExecuteOperationMetadata()
    assert operation.metadata.Unpack(metadata), operation
    return metadata


def response_of(operation: operations_pb2.Operation) -> re_pb2.ExecuteResponse:
    """The ExecuteResponse of a done Operation (never ``Operation.error``)."""
    assert operation.done, operation
    assert operation.WhichOneof("result") == "response", operation
    response = re_pb2.ExecuteResponse()
    assert operation.response.Unpack(response)
    return response


def stages(operations: Iterable[operations_pb2.Operation]) -> list[int]:
    """The stages of a stream with repeats (progress updates) collapsed."""
    seen: list[int] = []
    for operation in operations:
        stage = metadata_of(operation).stage
        if not seen or seen[-1] != stage:
            seen.append(stage)
    return seen


def precondition_failure(status: status_pb2.Status) -> error_details_pb2.PreconditionFailure:
    for detail in status.details:
        failure = error_details_pb2.PreconditionFailure()
        if detail.Unpack(failure):
            return failure
    raise AssertionError(f"no PreconditionFailure in {status}")


# ------------------------------------------------------------------ processes


def require_tool(name: str) -> str:
    """The path of tool ``name``; skips the test without it, fails on CI."""
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{name} is required on CI")
        pytest.skip(f"{name} is not installed")
    return found


def processes_with(marker: str) -> list[psutil.Process]:
    """Live (non-zombie) processes whose command line contains ``marker``,
    except the ``timeout -- 0`` first process the pidns containment puts in
    front of each action (its command line repeats the action's)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = process.info["cmdline"] or []
        if cmdline[1:3] == ["--", "0"] and cmdline[0].endswith("timeout"):
            continue
        if process.info["status"] != psutil.STATUS_ZOMBIE and any(marker in a for a in cmdline):
            found.append(process)
    return found


def wait_until(predicate: Callable[[], object], seconds: float = 10.0) -> bool:
    """Poll ``predicate`` every 20 ms for up to ``seconds``; its last truth value."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return bool(predicate())
        time.sleep(0.02)
    return True


# ------------------------------------------------------------------ the client


@dataclass
class Prepared:
    """An Action and its Command, uploaded unless asked otherwise."""

    action: re_pb2.Action
    command: re_pb2.Command
    action_digest: re_pb2.Digest
    blobs: list[bytes]


@dataclass
class Client:
    """Blocking stubs on one channel to the module's lre, plus REAPI helpers."""

    address: str
    instance: str = INSTANCE
    channel: grpc.Channel = field(init=False)

    def __post_init__(self) -> None:
        self.channel = grpc.insecure_channel(
            self.address,
            options=[
                ("grpc.max_receive_message_length", 64 << 20),
                ("grpc.max_send_message_length", 64 << 20),
            ],
        )
        self.cas: Any = re_grpc.ContentAddressableStorageStub(self.channel)
        self.bytestream: Any = bs_grpc.ByteStreamStub(self.channel)
        self.capabilities: Any = re_grpc.CapabilitiesStub(self.channel)
        self.action_cache: Any = re_grpc.ActionCacheStub(self.channel)
        self.execution: Any = re_grpc.ExecutionStub(self.channel)
        self.operations: Any = operations_pb2_grpc.OperationsStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    # CAS ---------------------------------------------------------------

    def upload(self, blobs: Iterable[bytes], **request: Any) -> None:
        """BatchUpdateBlobs; every blob must be accepted."""
        unique = {digest(blob).hash: blob for blob in blobs}
        if not unique:
            return
        reply = self.cas.BatchUpdateBlobs(
            re_pb2.BatchUpdateBlobsRequest(
                instance_name=self.instance,
                requests=[
                    re_pb2.BatchUpdateBlobsRequest.Request(digest=digest(b), data=b)
                    for b in unique.values()
                ],
                **request,
            ),
            timeout=30,
        )
        assert [r.status.code for r in reply.responses] == [0] * len(unique), reply

    def write(self, data: bytes, chunk: int, resource_suffix: str = "") -> re_pb2.Digest:
        """ByteStream.Write on ``{instance}/uploads/{uuid}/blobs/{hash}/{size}``."""
        d = digest(data)
        name = f"{self.instance}/uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}"
        name += resource_suffix

        def requests() -> Iterator[bs_pb2.WriteRequest]:
            for offset in range(0, len(data), chunk):
                yield bs_pb2.WriteRequest(
                    resource_name=name if offset == 0 else "",
                    write_offset=offset,
                    data=data[offset : offset + chunk],
                    finish_write=offset + chunk >= len(data),
                )

        reply = self.bytestream.Write(requests(), timeout=60)
        assert reply.committed_size in (len(data), -1), reply
        return d

    def read(self, d: re_pb2.Digest) -> bytes:
        """ByteStream.Read of a whole blob."""
        if d.size_bytes == 0:
            return b""
        name = f"{self.instance}/blobs/{d.hash}/{d.size_bytes}"
        return b"".join(
            r.data for r in self.bytestream.Read(bs_pb2.ReadRequest(resource_name=name), timeout=60)
        )

    def read_batch(self, digests: Sequence[re_pb2.Digest]) -> list[bytes]:
        reply = self.cas.BatchReadBlobs(
            re_pb2.BatchReadBlobsRequest(instance_name=self.instance, digests=digests),
            timeout=30,
        )
        assert [r.status.code for r in reply.responses] == [0] * len(digests), reply
        return [r.data for r in reply.responses]

    def missing(self, digests: Sequence[re_pb2.Digest], **request: Any) -> list[str]:
        reply = self.cas.FindMissingBlobs(
            re_pb2.FindMissingBlobsRequest(
                instance_name=self.instance, blob_digests=digests, **request
            ),
            timeout=30,
        )
        return [d.hash for d in reply.missing_blob_digests]

    def upload_tree(self, spec: TreeSpec) -> re_pb2.Digest:
        root, blobs = build_tree(spec)
        self.upload(blobs)
        return root

    # actions -----------------------------------------------------------

    def prepare(
        self,
        arguments: Sequence[str],
        *,
        inputs: TreeSpec | None = None,
        input_root: re_pb2.Digest | None = None,
        env: Mapping[str, str] | None = None,
        output_paths: Sequence[str] = (),
        output_files: Sequence[str] = (),
        output_directories: Sequence[str] = (),
        working_directory: str = "",
        action_platform: Mapping[str, str] | None = None,
        command_platform: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        do_not_cache: bool = False,
        upload: bool = True,
        salt: bytes | None = None,
    ) -> Prepared:
        """Build (and by default upload) an Action with a fresh salt."""
        blobs: list[bytes] = []
        if input_root is None:
            input_root, blobs = build_tree(inputs or {})
        command = re_pb2.Command(
            arguments=arguments,
            environment_variables=[
                re_pb2.Command.EnvironmentVariable(name=k, value=v)
                for k, v in sorted((env or {}).items())
            ],
            output_paths=sorted(output_paths),
            output_files=sorted(output_files),
            output_directories=sorted(output_directories),
            working_directory=working_directory,
        )
        if command_platform is not None:
            command.platform.CopyFrom(platform_of(command_platform))
        command_bytes = command.SerializeToString()
        action = re_pb2.Action(
            command_digest=digest(command_bytes),
            input_root_digest=input_root,
            do_not_cache=do_not_cache,
            salt=salt if salt is not None else uuid.uuid4().bytes,
        )
        if action_platform is not None:
            action.platform.CopyFrom(platform_of(action_platform))
        if timeout_s is not None:
            action.timeout.CopyFrom(duration_pb2.Duration(seconds=int(timeout_s)))
        action_bytes = action.SerializeToString()
        blobs += [command_bytes, action_bytes]
        if upload:
            self.upload(blobs)
        return Prepared(action, command, digest(action_bytes), blobs)

    def execute_request(
        self, prepared: Prepared | re_pb2.Digest, **fields: Any
    ) -> re_pb2.ExecuteRequest:
        action_digest = prepared.action_digest if isinstance(prepared, Prepared) else prepared
        return re_pb2.ExecuteRequest(
            instance_name=self.instance, action_digest=action_digest, **fields
        )

    def execute(
        self,
        prepared: Prepared | re_pb2.Digest,
        *,
        metadata: Sequence[tuple[str, bytes | str]] | None = None,
        timeout: float = 60,
        **fields: Any,
    ) -> list[operations_pb2.Operation]:
        """Execute and read the whole operation stream (ends with the done one)."""
        stream = self.execution.Execute(
            self.execute_request(prepared, **fields), metadata=metadata, timeout=timeout
        )
        return list(stream)

    def run(self, arguments: Sequence[str], **prepare: Any) -> re_pb2.ExecuteResponse:
        """Prepare, upload, Execute; the final ExecuteResponse."""
        operations = self.execute(self.prepare(arguments, **prepare))
        return response_of(operations[-1])

    def stdout(self, result: re_pb2.ActionResult) -> bytes:
        return result.stdout_raw or self.read(result.stdout_digest)

    def stderr(self, result: re_pb2.ActionResult) -> bytes:
        return result.stderr_raw or self.read(result.stderr_digest)


def platform_of(properties: Mapping[str, str]) -> re_pb2.Platform:
    return re_pb2.Platform(
        properties=[
            re_pb2.Platform.Property(name=k, value=v) for k, v in sorted(properties.items())
        ]
    )
