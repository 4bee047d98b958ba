"""gRPC adapters of the cache half of REAPI: Capabilities, CAS, ByteStream, ActionCache.

Each servicer resolves the request's instance, hands the work to Trio
through the shared ``TrioBridge`` and returns what comes back. Two answers
come straight from the gRPC thread when the store can give them there
(``StoreCapabilities.immediate_reads``): FindMissingBlobs and small ByteStream reads,
the two CAS calls a build makes per action. The logic is
in ``_cas_ops``, ``_tree``, ``_bytestream_ops`` and ``_action_results``;
statuses come from ``_status`` (the decorators).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from lre.cas import BlobStore
from lre.proto import bs_pb2, re_grpc, re_pb2
from lre.service._action_results import (
    DEFAULT_MAX_INLINE_BYTES,
    check_known_miss,
    get_action_result,
    update_action_result,
)
from lre.service._bridge import TrioBridge
from lre.service._bytestream_ops import (
    query_write_status,
    read_blob,
    write_blob,
    write_single,
    write_single_now,
)
from lre.service._capabilities import server_capabilities
from lre.service._cas_ops import batch_read, batch_update, find_missing, find_missing_now
from lre.service._instances import Instances
from lre.service._resource_names import parse_read_resource
from lre.service._status import stream_rpc, unary_rpc
from lre.service._tree import tree_pages
from lre.service._uploads import UploadRegistry

Context = grpc.aio.ServicerContext[Any, Any]
BYTESTREAM_SERVICE = "google.bytestream.ByteStream"
CAS_SERVICE = "build.bazel.remote.execution.v2.ContentAddressableStorage"


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheServiceOptions:
    """Limits of the cache services (from ``ServerSpec`` in the composition root).

    ``max_batch_total_size_bytes`` must stay well below the listener's
    ``max_message_bytes``.
    """

    max_batch_total_size_bytes: int = 4_000_000
    max_inline_bytes: int = DEFAULT_MAX_INLINE_BYTES
    upload_ttl_seconds: float = 600.0
    max_partial_upload_bytes: int = 1 << 30
    read_buffer_chunks: int = 4


class CapabilitiesServicer:
    """``GetCapabilities``: answered on the asyncio side (no I/O)."""

    def __init__(self, instances: Instances, options: CacheServiceOptions) -> None:
        self._instances = instances
        self._options = options

    def register(self, server: grpc.aio.Server) -> None:
        re_grpc.add_CapabilitiesServicer_to_server(self, server)

    @unary_rpc
    async def GetCapabilities(
        self, request: re_pb2.GetCapabilitiesRequest, context: Context
    ) -> re_pb2.ServerCapabilities:
        backends = self._instances.resolve(request.instance_name)
        return server_capabilities(
            backends, max_batch_total_size_bytes=self._options.max_batch_total_size_bytes
        )


class _BridgedServicer:
    """What the servicers that hand their work to Trio share."""

    def __init__(
        self, bridge: TrioBridge, instances: Instances, options: CacheServiceOptions
    ) -> None:
        self._bridge = bridge
        self._instances = instances
        self._options = options

    def _store(self, instance_name: str) -> BlobStore:
        """The instance's CAS; an unknown instance raises ``InvalidArgument``."""
        return self._instances.resolve(instance_name).cas


def _register_generic(
    server: grpc.aio.Server, service: str, handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
) -> None:
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))


class ContentAddressableStorageServicer(_BridgedServicer):
    """FindMissingBlobs, BatchUpdateBlobs, BatchReadBlobs, GetTree."""

    def register(self, server: grpc.aio.Server) -> None:
        """Register the four methods."""
        handlers = {
            "FindMissingBlobs": grpc.unary_unary_rpc_method_handler(
                self.FindMissingBlobs,
                request_deserializer=re_pb2.FindMissingBlobsRequest.FromString,
                response_serializer=re_pb2.FindMissingBlobsResponse.SerializeToString,
            ),
            "BatchUpdateBlobs": grpc.unary_unary_rpc_method_handler(
                self.BatchUpdateBlobs,
                request_deserializer=re_pb2.BatchUpdateBlobsRequest.FromString,
                response_serializer=re_pb2.BatchUpdateBlobsResponse.SerializeToString,
            ),
            "BatchReadBlobs": grpc.unary_unary_rpc_method_handler(
                self.BatchReadBlobs,
                request_deserializer=re_pb2.BatchReadBlobsRequest.FromString,
                response_serializer=re_pb2.BatchReadBlobsResponse.SerializeToString,
            ),
            "GetTree": grpc.unary_stream_rpc_method_handler(
                self.GetTree,
                request_deserializer=re_pb2.GetTreeRequest.FromString,
                response_serializer=re_pb2.GetTreeResponse.SerializeToString,
            ),
        }
        _register_generic(server, CAS_SERVICE, handlers)

    @unary_rpc
    async def FindMissingBlobs(
        self, request: re_pb2.FindMissingBlobsRequest, context: Context
    ) -> re_pb2.FindMissingBlobsResponse:
        store = self._store(request.instance_name)
        reads = store.capabilities().immediate_reads
        if reads is not None:
            response = find_missing_now(reads, request)
            if response is not None:
                return response
        return await self._bridge.call(functools.partial(find_missing, store, request))

    @unary_rpc
    async def BatchUpdateBlobs(
        self, request: re_pb2.BatchUpdateBlobsRequest, context: Context
    ) -> re_pb2.BatchUpdateBlobsResponse:
        store = self._store(request.instance_name)
        return await self._bridge.call(functools.partial(batch_update, store, request))

    @unary_rpc
    async def BatchReadBlobs(
        self, request: re_pb2.BatchReadBlobsRequest, context: Context
    ) -> re_pb2.BatchReadBlobsResponse:
        store = self._store(request.instance_name)
        limit = self._options.max_batch_total_size_bytes
        return await self._bridge.call(functools.partial(batch_read, store, request, limit))

    @stream_rpc
    async def GetTree(
        self, request: re_pb2.GetTreeRequest, context: Context
    ) -> AsyncIterator[re_pb2.GetTreeResponse]:
        store = self._store(request.instance_name)
        async for page in self._bridge.stream(functools.partial(tree_pages, store, request)):
            yield page


class ByteStreamServicer(_BridgedServicer):
    """Read, Write (resumable) and QueryWriteStatus over the instance's CAS."""

    def __init__(
        self, bridge: TrioBridge, instances: Instances, options: CacheServiceOptions
    ) -> None:
        super().__init__(bridge, instances, options)
        self._uploads = UploadRegistry(
            ttl_seconds=options.upload_ttl_seconds, max_bytes=options.max_partial_upload_bytes
        )

    def register(self, server: grpc.aio.Server) -> None:
        """Register the three methods."""
        handlers = {
            "Read": grpc.unary_stream_rpc_method_handler(
                self.Read,
                request_deserializer=bs_pb2.ReadRequest.FromString,
                response_serializer=bs_pb2.ReadResponse.SerializeToString,
            ),
            "Write": grpc.stream_unary_rpc_method_handler(
                self.Write,
                request_deserializer=bs_pb2.WriteRequest.FromString,
                response_serializer=bs_pb2.WriteResponse.SerializeToString,
            ),
            "QueryWriteStatus": grpc.unary_unary_rpc_method_handler(
                self.QueryWriteStatus,
                request_deserializer=bs_pb2.QueryWriteStatusRequest.FromString,
                response_serializer=bs_pb2.QueryWriteStatusResponse.SerializeToString,
            ),
        }
        _register_generic(server, BYTESTREAM_SERVICE, handlers)

    @stream_rpc
    async def Read(
        self, request: bs_pb2.ReadRequest, context: Context
    ) -> AsyncIterator[bs_pb2.ReadResponse]:
        resource = parse_read_resource(request.resource_name)
        store = self._store(resource.instance_name)
        reads = None if resource.compressed else store.capabilities().immediate_reads
        if reads is not None:
            data = reads.read_now(resource.digest, request.read_offset, request.read_limit)
            if data is not None:
                yield bs_pb2.ReadResponse(data=data)
                return
        produce = functools.partial(
            read_blob, store, resource, request.read_offset, request.read_limit
        )
        async for data in self._bridge.stream(produce, buffer=self._options.read_buffer_chunks):
            yield bs_pb2.ReadResponse(data=data)

    @unary_rpc
    async def Write(
        self, request_iterator: AsyncIterator[bs_pb2.WriteRequest], context: Context
    ) -> bs_pb2.WriteResponse:
        """A blob sent in one message (``finish_write`` in the first, as
        Bazel and Buck2 send every small blob) is written in the hop's own
        callback on the Trio thread when the store can do it at once
        (``write_single_now``), else takes one unary hop to a Trio task;
        longer uploads stream their requests across."""
        requests = aiter(request_iterator)
        first = await anext(requests, None)
        if first is not None and first.finish_write:
            done = await self._bridge.call_now(
                functools.partial(write_single_now, first, self._store, self._uploads)
            )
            if done is not None:
                return done
            return await self._bridge.call(
                functools.partial(
                    write_single, first, resolve_store=self._store, uploads=self._uploads
                )
            )
        consume = functools.partial(write_blob, resolve_store=self._store, uploads=self._uploads)
        return await self._bridge.call_with_requests(consume, _prepend(first, requests))

    @unary_rpc
    async def QueryWriteStatus(
        self, request: bs_pb2.QueryWriteStatusRequest, context: Context
    ) -> bs_pb2.QueryWriteStatusResponse:
        return await self._bridge.call(
            functools.partial(query_write_status, request, self._store, self._uploads)
        )


class ActionCacheServicer(_BridgedServicer):
    """GetActionResult (completeness-checked, inlining) and UpdateActionResult."""

    def register(self, server: grpc.aio.Server) -> None:
        re_grpc.add_ActionCacheServicer_to_server(self, server)

    @unary_rpc
    async def GetActionResult(
        self, request: re_pb2.GetActionResultRequest, context: Context
    ) -> re_pb2.ActionResult:
        backends = self._instances.resolve(request.instance_name)
        check_known_miss(backends, request)  # a miss is answered here, without Trio
        return await self._bridge.call(
            functools.partial(get_action_result, backends, request, self._options.max_inline_bytes)
        )

    @unary_rpc
    async def UpdateActionResult(
        self, request: re_pb2.UpdateActionResultRequest, context: Context
    ) -> re_pb2.ActionResult:
        backends = self._instances.resolve(request.instance_name)
        return await self._bridge.call(functools.partial(update_action_result, backends, request))


async def _prepend(
    first: bs_pb2.WriteRequest | None, rest: AsyncIterator[bs_pb2.WriteRequest]
) -> AsyncIterator[bs_pb2.WriteRequest]:
    """``first`` (when there was one) and then ``rest`` (asyncio side)."""
    if first is None:
        return
    yield first
    async for request in rest:
        yield request


def cache_servicers(
    bridge: TrioBridge, instances: Instances, options: CacheServiceOptions | None = None
) -> list[
    CapabilitiesServicer
    | ContentAddressableStorageServicer
    | ByteStreamServicer
    | ActionCacheServicer
]:
    """The four cache servicers sharing ``bridge`` and ``instances``."""
    options = options or CacheServiceOptions()
    return [
        CapabilitiesServicer(instances, options),
        ContentAddressableStorageServicer(bridge, instances, options),
        ByteStreamServicer(bridge, instances, options),
        ActionCacheServicer(bridge, instances, options),
    ]
