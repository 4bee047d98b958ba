"""Run by tests/proto/test_oldest_versions.py inside a venv holding only the
oldest protobuf, grpcio and googleapis-common-protos pyproject.toml allows.

Imports every generated module through ``lre.proto`` and makes one real gRPC
call: a GetCapabilities served by a generated servicer on a loopback port,
answered with a message that goes through serialization both ways. Prints
the versions it ran with. Any failure raises (non-zero exit).
"""

from __future__ import annotations

import sys
from concurrent import futures

import google.protobuf
import grpc

from lre.proto import bs_grpc, bs_pb2, lre_pb2, operations_pb2, re_grpc, re_pb2, status_pb2


class _Capabilities(re_grpc.CapabilitiesServicer):  # type: ignore[misc]
    def GetCapabilities(self, request: object, context: object) -> object:
        assert isinstance(request, re_pb2.GetCapabilitiesRequest)
        return re_pb2.ServerCapabilities(
            cache_capabilities=re_pb2.CacheCapabilities(
                digest_functions=[re_pb2.DigestFunction.SHA256],
                max_batch_total_size_bytes=4 << 20,
            ),
            execution_capabilities=re_pb2.ExecutionCapabilities(exec_enabled=True),
        )


def main() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    re_grpc.add_CapabilitiesServicer_to_server(_Capabilities(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = re_grpc.CapabilitiesStub(channel).GetCapabilities(
                re_pb2.GetCapabilitiesRequest(instance_name="main"), timeout=30
            )
    finally:
        server.stop(None)
    assert reply.execution_capabilities.exec_enabled
    assert list(reply.cache_capabilities.digest_functions) == [re_pb2.DigestFunction.SHA256]
    digest = re_pb2.Digest(hash="a" * 64, size_bytes=3)
    assert re_pb2.Digest.FromString(digest.SerializeToString()) == digest
    write = bs_pb2.WriteRequest(resource_name="uploads/x/blobs/a/3", data=b"abc")
    assert bs_pb2.WriteRequest.FromString(write.SerializeToString()).data == b"abc"
    operation = operations_pb2.Operation(name="op", done=True)
    operation.response.Pack(re_pb2.ExecuteResponse(status=status_pb2.Status(code=0)))
    assert operation.response.Is(re_pb2.ExecuteResponse.DESCRIPTOR)
    assert bs_grpc.ByteStreamStub is not None and lre_pb2.DESCRIPTOR.name
    print(f"protobuf {google.protobuf.__version__} grpcio {grpc.__version__}: ok")


if __name__ == "__main__":
    main()
    sys.exit(0)
