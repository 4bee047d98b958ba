"""The REAPI client of the tests: blocking grpc stubs on one channel, used the
way Bazel and Buck2 use them, and readers of what Execute returns.

Synchronous tests call the methods directly. Trio tests run them in a worker
thread with ``in_thread`` / ``stream`` so the Trio loop, which may also run
the server, never blocks. A failed call raises ``grpc.RpcError``; a reply
that is not what every caller expects fails an ``assert`` naming the reply.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import grpc
import trio
from google.longrunning import operations_pb2_grpc

from lre.digest import Digest
from lre.proto import (
    bs_grpc,
    bs_pb2,
    error_details_pb2,
    operations_pb2,
    re_grpc,
    re_pb2,
    status_pb2,
)
from tests._support.actions import (
    BuiltAction,
    as_digest,
    blob_digest,
    build_action,
)

T = TypeVar("T")

#: The instance name a client uses unless told otherwise (Buck2's examples use "main").
INSTANCE = "main"

NOT_FOUND = grpc.StatusCode.NOT_FOUND.value[0]

Stage = re_pb2.ExecutionStage


def digest(data: bytes) -> re_pb2.Digest:
    """SHA-256 digest computed by the client itself (not by lre), as a message."""
    return blob_digest(data).to_proto()


def subject(d: re_pb2.Digest) -> str:
    """The ``blobs/{hash}/{size}`` form PreconditionFailure names a blob by."""
    return f"blobs/{d.hash}/{d.size_bytes}"


def open_channel(address: str) -> grpc.Channel:
    """An insecure channel to ``address`` taking messages up to 64 MiB."""
    return grpc.insecure_channel(
        address,
        options=[
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.max_send_message_length", 64 << 20),
        ],
    )


class Client:
    """Blocking stubs on one channel to ``address``, plus REAPI helpers on ``instance``."""

    def __init__(self, address: str, instance: str = INSTANCE) -> None:
        self.address = address
        self.instance = instance
        self.channel = open_channel(address)
        self.cas: Any = re_grpc.ContentAddressableStorageStub(self.channel)
        self.bytestream: Any = bs_grpc.ByteStreamStub(self.channel)
        self.capabilities: Any = re_grpc.CapabilitiesStub(self.channel)
        self.action_cache: Any = re_grpc.ActionCacheStub(self.channel)
        self.execution: Any = re_grpc.ExecutionStub(self.channel)
        self.operations: Any = operations_pb2_grpc.OperationsStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # Trio ---------------------------------------------------------------

    async def in_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` (a blocking call) in a worker thread."""
        return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))

    async def stream(self, fn: Callable[..., Iterator[T]], *args: Any) -> list[T]:
        """Every message of the streaming call ``fn(*args)``, read in a worker thread."""
        return await trio.to_thread.run_sync(lambda: list(fn(*args)))

    # CAS ---------------------------------------------------------------

    def upload(self, blobs: Iterable[bytes] | Mapping[Digest, bytes], **request: Any) -> None:
        """BatchUpdateBlobs; every blob must be accepted."""
        values = blobs.values() if isinstance(blobs, Mapping) else blobs
        unique = {digest(blob).hash: blob for blob in values}
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
        """BatchReadBlobs; every blob must be there."""
        reply = self.cas.BatchReadBlobs(
            re_pb2.BatchReadBlobsRequest(instance_name=self.instance, digests=digests),
            timeout=30,
        )
        assert [r.status.code for r in reply.responses] == [0] * len(digests), reply
        return [r.data for r in reply.responses]

    def read_blob(self, d: Digest) -> bytes | None:
        """BatchReadBlobs of one blob; ``None`` when the server answers NOT_FOUND."""
        reply = self.cas.BatchReadBlobs(
            re_pb2.BatchReadBlobsRequest(instance_name=self.instance, digests=[d.to_proto()]),
            timeout=30,
        )
        (response,) = reply.responses
        if response.status.code == NOT_FOUND:
            return None
        assert response.status.code == 0, response.status
        return bytes(response.data)

    def missing(self, digests: Sequence[Digest | re_pb2.Digest], **request: Any) -> list[Digest]:
        """FindMissingBlobs: the digests the server does not hold."""
        reply = self.cas.FindMissingBlobs(
            re_pb2.FindMissingBlobsRequest(
                instance_name=self.instance,
                blob_digests=[as_digest(d).to_proto() for d in digests],
                **request,
            ),
            timeout=30,
        )
        return [as_digest(d) for d in reply.missing_blob_digests]

    # action cache --------------------------------------------------------

    def get_result(self, action_digest: Digest) -> re_pb2.ActionResult | None:
        """GetActionResult; ``None`` when the server answers NOT_FOUND."""
        try:
            result: re_pb2.ActionResult = self.action_cache.GetActionResult(
                re_pb2.GetActionResultRequest(
                    instance_name=self.instance, action_digest=action_digest.to_proto()
                ),
                timeout=30,
            )
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return result

    # actions -----------------------------------------------------------

    def prepare(
        self,
        arguments: Sequence[str],
        *,
        output_paths: Sequence[str] = (),
        output_files: Sequence[str] = (),
        output_directories: Sequence[str] = (),
        upload: bool = True,
        salt: bytes | None = None,
        **action: Any,
    ) -> BuiltAction:
        """Build (and by default upload) an Action with a fresh salt and its
        output lists sorted; ``action`` as ``build_action`` takes it."""
        prepared = build_action(
            arguments,
            output_paths=sorted(output_paths),
            output_files=sorted(output_files),
            output_directories=sorted(output_directories),
            salt=salt if salt is not None else uuid.uuid4().bytes,
            instance=self.instance,
            **action,
        )
        if upload:
            self.upload(prepared.blobs)
        return prepared

    def execute_request(
        self, prepared: BuiltAction | re_pb2.Digest, **fields: Any
    ) -> re_pb2.ExecuteRequest:
        action_digest = prepared.action_digest if isinstance(prepared, BuiltAction) else prepared
        return re_pb2.ExecuteRequest(
            instance_name=self.instance, action_digest=action_digest, **fields
        )

    def execute(
        self,
        prepared: BuiltAction | re_pb2.Digest,
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


# ------------------------------------------------------------------ what Execute returns


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
