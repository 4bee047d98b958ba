"""ActionCache through a real server: completeness, inlining, validation."""

from __future__ import annotations

import grpc
import pytest
import trio

from lre.cas import ActionResultCache, MemoryActionCache, MemoryStore
from lre.digest import digest_of
from lre.proto import re_pb2
from lre.service import InstanceBackends, Instances, TrioBridge
from tests._support.reapi import Client
from tests._support.servers import start_server
from tests.service.conftest import ServerHandle
from tests.service.test_cas import proto, upload

ACTION = proto(b"some action")


def result_with(
    stdout: bytes, output: bytes, tree: re_pb2.Tree | None = None
) -> re_pb2.ActionResult:
    result = re_pb2.ActionResult(
        exit_code=0,
        stdout_digest=proto(stdout),
        output_files=[re_pb2.OutputFile(path="out/a.o", digest=proto(output))],
    )
    if tree is not None:
        result.output_directories.add(path="out/dir", tree_digest=proto(tree.SerializeToString()))
    return result


async def update(
    server: ServerHandle, result: re_pb2.ActionResult, instance: str = "main"
) -> re_pb2.ActionResult:
    request = re_pb2.UpdateActionResultRequest(
        instance_name=instance, action_digest=ACTION, action_result=result
    )
    return await server.client.in_thread(server.client.action_cache.UpdateActionResult, request)


async def get(server: ServerHandle, **flags: object) -> re_pb2.ActionResult:
    request = re_pb2.GetActionResultRequest(instance_name="main", action_digest=ACTION, **flags)
    return await server.client.in_thread(server.client.action_cache.GetActionResult, request)


async def test_update_then_get_with_inlining(cache_server: ServerHandle) -> None:
    stdout, output, inner = b"compiler said hi\n", b"\x7fELF object", b"file in a tree"
    tree = re_pb2.Tree(
        root=re_pb2.Directory(files=[re_pb2.FileNode(name="x", digest=proto(inner))])
    )
    await upload(cache_server, [stdout, output, inner, tree.SerializeToString()])
    result = result_with(stdout, output, tree)
    stored = re_pb2.ActionResult()
    stored.CopyFrom(result)
    stored.execution_metadata.SetInParent()  # the cache always stores one (Buck2 needs it)
    assert await update(cache_server, result) == stored

    plain = await get(cache_server)
    assert plain == stored
    assert plain.stdout_raw == b"" and plain.output_files[0].contents == b""
    inlined = await get(cache_server, inline_stdout=True, inline_output_files=["out/a.o"])
    assert inlined.stdout_raw == stdout
    assert inlined.output_files[0].contents == output


async def test_incomplete_result_is_not_found(nursery: trio.Nursery) -> None:
    """After real eviction (a small store), the stored result is NOT_FOUND."""
    store = MemoryStore(max_bytes=4000)
    results = ActionResultCache(MemoryActionCache(), store)
    address, _, _ = await start_server(
        nursery, {"main": InstanceBackends(cas=store, action_cache=results)}
    )
    with Client(address) as client:
        server = ServerHandle(address, store, TrioBridge(), Instances({}), client)
        stdout, output, inner = b"out", b"obj", b"inner file"
        tree = re_pb2.Tree(
            root=re_pb2.Directory(files=[re_pb2.FileNode(name="x", digest=proto(inner))])
        )
        await upload(server, [stdout, output, inner, tree.SerializeToString()], "main")
        await update(server, result_with(stdout, output, tree))
        assert (await get(server)).exit_code == 0
        await upload(server, [bytes([i]) * 1000 for i in range(4)], "main")  # evicts the rest
        with pytest.raises(grpc.RpcError) as info:
            await get(server)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_update_with_missing_blobs_is_failed_precondition(cache_server: ServerHandle) -> None:
    with pytest.raises(grpc.RpcError) as info:
        await update(cache_server, result_with(b"never uploaded", b"nor this"))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert digest_of(b"nor this").hash in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        await get(cache_server)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_read_only_and_absent_action_caches(cache_server: ServerHandle) -> None:
    await upload(cache_server, [b"o", b"p"])
    for instance in ("team/linux/x86", ""):
        with pytest.raises(grpc.RpcError) as info:
            await update(cache_server, result_with(b"o", b"p"), instance)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    request = re_pb2.GetActionResultRequest(instance_name="", action_digest=ACTION)
    with pytest.raises(grpc.RpcError) as info:
        await cache_server.client.in_thread(
            cache_server.client.action_cache.GetActionResult, request
        )
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_malformed_action_digest(cache_server: ServerHandle) -> None:
    request = re_pb2.GetActionResultRequest(
        instance_name="main", action_digest=re_pb2.Digest(hash="xyz", size_bytes=1)
    )
    with pytest.raises(grpc.RpcError) as info:
        await cache_server.client.in_thread(
            cache_server.client.action_cache.GetActionResult, request
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "action_digest.hash" in info.value.details()
    bad = re_pb2.ActionResult(
        output_files=[re_pb2.OutputFile(path="a", digest=re_pb2.Digest(hash="q"))]
    )
    with pytest.raises(grpc.RpcError) as info:
        await update(cache_server, bad)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "output_files[0].digest" in info.value.details()


async def test_a_miss_is_answered_without_trio(
    cache_server: ServerHandle,
) -> None:
    """Buck2 asks GetActionResult before every Execute and Bazel before every
    cacheable one; most are misses, known from memory on the gRPC thread."""
    client = cache_server.client
    before = cache_server.bridge.statistics().started_total
    for i in range(5):
        with pytest.raises(grpc.RpcError) as caught:
            await client.in_thread(
                client.action_cache.GetActionResult,
                re_pb2.GetActionResultRequest(
                    instance_name="main", action_digest=proto(b"no such action %d" % i)
                ),
            )
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        assert "no complete cached result" in (caught.value.details() or "")
    assert cache_server.bridge.statistics().started_total == before

    with pytest.raises(grpc.RpcError) as caught:
        await client.in_thread(
            client.action_cache.GetActionResult,
            re_pb2.GetActionResultRequest(
                instance_name="main",
                action_digest=re_pb2.Digest(hash="xyz", size_bytes=1),
            ),
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "action_digest" in (caught.value.details() or "")
