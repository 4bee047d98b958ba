"""A small REAPI client for the upstream tests (sync grpc, run in a thread),
playing the part of Bazel against an lre address."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import grpc
import trio

from lre.digest import Digest, digest_of
from lre.proto import re_grpc, re_pb2


@dataclass(frozen=True)
class BuiltAction:
    """An action and every blob it needs (Command, input root, Action)."""

    digest: Digest
    blobs: dict[Digest, bytes]
    request: re_pb2.ExecuteRequest


def make_action(
    script: str,
    *,
    outputs: Sequence[str] = ("out.txt",),
    platform: dict[str, str] | None = None,
    instance: str = "",
    inputs: dict[str, bytes] | None = None,
    salt: str = "",
) -> BuiltAction:
    """``sh -c script`` with ``inputs`` as files of the input root."""
    blobs: dict[Digest, bytes] = {}

    def put(data: bytes) -> Digest:
        digest = digest_of(data)
        blobs[digest] = data
        return digest

    root = re_pb2.Directory()
    for name in sorted(inputs or {}):
        root.files.add(name=name, digest=put((inputs or {})[name]).to_proto())
    root_digest = put(root.SerializeToString(deterministic=True))
    command = re_pb2.Command(
        arguments=["/bin/sh", "-c", script],
        output_paths=list(outputs),
        environment_variables=[re_pb2.Command.EnvironmentVariable(name="SALT", value=salt)],
    )
    for key, value in sorted((platform or {}).items()):
        command.platform.properties.add(name=key, value=value)
    command_digest = put(command.SerializeToString(deterministic=True))
    action = re_pb2.Action(
        command_digest=command_digest.to_proto(), input_root_digest=root_digest.to_proto()
    )
    action.platform.CopyFrom(command.platform)
    action_digest = put(action.SerializeToString(deterministic=True))
    request = re_pb2.ExecuteRequest(instance_name=instance, action_digest=action_digest.to_proto())
    return BuiltAction(action_digest, blobs, request)


class Client:
    """Sync REAPI calls to ``address``; each ``a*`` method runs in a thread."""

    def __init__(self, address: str, instance: str = "") -> None:
        self.address = address
        self.instance = instance

    def _channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.address)

    def upload(self, blobs: dict[Digest, bytes]) -> None:
        with self._channel() as channel:
            stub = re_grpc.ContentAddressableStorageStub(channel)
            request = re_pb2.BatchUpdateBlobsRequest(instance_name=self.instance)
            for digest, data in blobs.items():
                request.requests.add(digest=digest.to_proto(), data=data)
            reply = stub.BatchUpdateBlobs(request, timeout=30)
            assert all(r.status.code == 0 for r in reply.responses), reply

    def find_missing(self, digests: Sequence[Digest]) -> list[Digest]:
        with self._channel() as channel:
            stub = re_grpc.ContentAddressableStorageStub(channel)
            reply = stub.FindMissingBlobs(
                re_pb2.FindMissingBlobsRequest(
                    instance_name=self.instance, blob_digests=[d.to_proto() for d in digests]
                ),
                timeout=30,
            )
            return [Digest(d.hash, d.size_bytes) for d in reply.missing_blob_digests]

    def read(self, digest: Digest) -> bytes | None:
        with self._channel() as channel:
            stub = re_grpc.ContentAddressableStorageStub(channel)
            reply = stub.BatchReadBlobs(
                re_pb2.BatchReadBlobsRequest(
                    instance_name=self.instance, digests=[digest.to_proto()]
                ),
                timeout=30,
            )
            (response,) = reply.responses
            if response.status.code == grpc.StatusCode.NOT_FOUND.value[0]:
                return None
            assert response.status.code == 0, response.status
            return bytes(response.data)

    def get_result(self, action_digest: Digest) -> re_pb2.ActionResult | None:
        with self._channel() as channel:
            stub = re_grpc.ActionCacheStub(channel)
            try:
                result: re_pb2.ActionResult = stub.GetActionResult(
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

    async def aupload(self, blobs: dict[Digest, bytes]) -> None:
        await trio.to_thread.run_sync(self.upload, blobs)

    async def afind_missing(self, digests: Sequence[Digest]) -> list[Digest]:
        return await trio.to_thread.run_sync(self.find_missing, digests)

    async def aread(self, digest: Digest) -> bytes | None:
        return await trio.to_thread.run_sync(self.read, digest)

    async def aget_result(self, action_digest: Digest) -> re_pb2.ActionResult | None:
        return await trio.to_thread.run_sync(self.get_result, action_digest)
