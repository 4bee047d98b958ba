"""The gRPC metrics interceptor on a real lre gRPC server (127.0.0.1)."""

from __future__ import annotations

import grpc
import pytest
import trio

from lre.cas import ActionResultCache, MemoryActionCache, MemoryStore
from lre.digest import digest_of
from lre.proto import bs_pb2, re_pb2
from lre.service import (
    GrpcServer,
    InstanceBackends,
    Instances,
    RpcMetrics,
    ServerOptions,
    TrioBridge,
    cache_servicers,
)

EXPECTED_METHODS = {
    "Capabilities/GetCapabilities",
    "ActionCache/GetActionResult",
    "ContentAddressableStorage/FindMissingBlobs",
    "ByteStream/Read",
    "unknown",
}


async def test_interceptor_counts_codes_and_latency(nursery: trio.Nursery) -> None:
    store = MemoryStore(64 << 20)
    instances = Instances(
        {
            "main": InstanceBackends(
                cas=store, action_cache=ActionResultCache(MemoryActionCache(), store)
            )
        }
    )
    metrics = RpcMetrics()
    bridge = TrioBridge()
    server = GrpcServer(
        ServerOptions(address="127.0.0.1:0", grace_seconds=0.5, rpc_metrics=metrics),
        cache_servicers(bridge, instances),
        bridge,
    )
    address: str = await nursery.start(server.serve)
    missing = digest_of(b"never stored")

    def client_calls() -> dict[str, grpc.StatusCode]:
        codes: dict[str, grpc.StatusCode] = {}
        with grpc.insecure_channel(address) as channel:
            capabilities = channel.unary_unary(
                "/build.bazel.remote.execution.v2.Capabilities/GetCapabilities",
                request_serializer=re_pb2.GetCapabilitiesRequest.SerializeToString,
                response_deserializer=re_pb2.ServerCapabilities.FromString,
            )
            for _ in range(3):
                capabilities(re_pb2.GetCapabilitiesRequest(instance_name="main"))
            find = channel.unary_unary(
                "/build.bazel.remote.execution.v2.ContentAddressableStorage/FindMissingBlobs",
                request_serializer=re_pb2.FindMissingBlobsRequest.SerializeToString,
                response_deserializer=re_pb2.FindMissingBlobsResponse.FromString,
            )
            find(re_pb2.FindMissingBlobsRequest(instance_name="main",
                                                blob_digests=[missing.to_proto()]))  # fmt: skip
            get = channel.unary_unary(
                "/build.bazel.remote.execution.v2.ActionCache/GetActionResult",
                request_serializer=re_pb2.GetActionResultRequest.SerializeToString,
                response_deserializer=re_pb2.ActionResult.FromString,
            )
            for name, call in (
                ("ac", lambda: get(re_pb2.GetActionResultRequest(
                    instance_name="main", action_digest=missing.to_proto()))),
                ("read", lambda: list(channel.unary_stream(
                    "/google.bytestream.ByteStream/Read",
                    request_serializer=bs_pb2.ReadRequest.SerializeToString,
                    response_deserializer=bs_pb2.ReadResponse.FromString,
                )(bs_pb2.ReadRequest(
                    resource_name=f"main/blobs/{missing.hash}/{missing.size_bytes}")))),
                ("bogus", lambda: channel.unary_unary("/no.such.Service/Call")(b"")),
            ):  # fmt: skip
                with pytest.raises(grpc.RpcError) as info:
                    call()
                codes[name] = info.value.code()
        return codes

    codes = await trio.to_thread.run_sync(client_calls)
    assert codes == {
        "ac": grpc.StatusCode.NOT_FOUND,
        "read": grpc.StatusCode.NOT_FOUND,
        "bogus": grpc.StatusCode.UNIMPLEMENTED,
    }
    stats = {m.method: m for m in metrics.statistics().methods}
    assert set(stats) == EXPECTED_METHODS
    assert dict(stats["Capabilities/GetCapabilities"].codes) == {"OK": 3}
    assert dict(stats["ContentAddressableStorage/FindMissingBlobs"].codes) == {"OK": 1}
    assert dict(stats["ActionCache/GetActionResult"].codes) == {"NOT_FOUND": 1}
    assert dict(stats["ByteStream/Read"].codes) == {"NOT_FOUND": 1}
    assert dict(stats["unknown"].codes) == {"UNIMPLEMENTED": 1}
    capabilities = stats["Capabilities/GetCapabilities"]
    assert capabilities.count == 3 and sum(capabilities.bucket_counts) == 3
    assert 0 < capabilities.sum_seconds < 5
