"""Capabilities and ContentAddressableStorage through a real server and client."""

from __future__ import annotations

import grpc
import pytest
import zstandard

from lre.digest import EMPTY_DIGEST, digest_of
from lre.proto import re_pb2
from tests.service.conftest import ServerHandle

ZSTD = re_pb2.Compressor.ZSTD


def proto(data: bytes) -> re_pb2.Digest:
    return digest_of(data).to_proto()


async def upload(server: ServerHandle, blobs: list[bytes], instance: str = "") -> None:
    request = re_pb2.BatchUpdateBlobsRequest(
        instance_name=instance,
        requests=[re_pb2.BatchUpdateBlobsRequest.Request(digest=proto(b), data=b) for b in blobs],
    )
    response = await server.client.in_thread(server.client.cas.BatchUpdateBlobs, request)
    assert [r.status.code for r in response.responses] == [0] * len(blobs)


async def test_capabilities(cache_server: ServerHandle) -> None:
    caps = await cache_server.client.in_thread(
        cache_server.client.capabilities.GetCapabilities,
        re_pb2.GetCapabilitiesRequest(instance_name="team/linux/x86"),
    )
    cache = caps.cache_capabilities
    assert list(cache.digest_functions) == [re_pb2.DigestFunction.SHA256]
    assert cache.max_batch_total_size_bytes == 4_000_000
    assert ZSTD in cache.supported_compressors
    assert ZSTD in cache.supported_batch_update_compressors
    assert cache.symlink_absolute_path_strategy == re_pb2.SymlinkAbsolutePathStrategy.DISALLOWED
    assert (caps.low_api_version.major, caps.low_api_version.minor) == (2, 0)
    assert (caps.high_api_version.major, caps.high_api_version.minor) >= (2, 3)
    # No action cache and no scheduler on these instances.
    assert not cache.action_cache_update_capabilities.update_enabled
    assert not caps.execution_capabilities.exec_enabled


async def test_unknown_instance_is_invalid_argument(cache_server: ServerHandle) -> None:
    with pytest.raises(grpc.RpcError) as info:
        await cache_server.client.in_thread(
            cache_server.client.capabilities.GetCapabilities,
            re_pb2.GetCapabilitiesRequest(instance_name="nope"),
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'nope'" in info.value.details()


async def test_find_missing_blobs(cache_server: ServerHandle) -> None:
    present = [b"alpha", b"beta"]
    await upload(cache_server, present, "main")
    absent = proto(b"gamma")
    request = re_pb2.FindMissingBlobsRequest(
        instance_name="main",
        blob_digests=[proto(b"alpha"), absent, EMPTY_DIGEST.to_proto(), proto(b"beta"), absent],
    )
    response = await cache_server.client.in_thread(
        cache_server.client.cas.FindMissingBlobs, request
    )
    assert list(response.missing_blob_digests) == [absent]


async def test_find_missing_blobs_bulk(cache_server: ServerHandle) -> None:
    """A large request (read in bulk): duplicates once, request order, empty blob present."""
    present = [f"present {i}".encode() for i in range(50)]
    await upload(cache_server, present, "main")
    absent = [proto(f"absent {i}".encode() * (i + 1)) for i in range(300)]
    asked = [*absent[:150], *map(proto, present), EMPTY_DIGEST.to_proto(), *absent]
    request = re_pb2.FindMissingBlobsRequest(
        instance_name="main", blob_digests=asked, digest_function=re_pb2.DigestFunction.SHA256
    )
    response = await cache_server.client.in_thread(
        cache_server.client.cas.FindMissingBlobs, request
    )
    assert list(response.missing_blob_digests) == absent
    everything = re_pb2.FindMissingBlobsRequest(instance_name="main", blob_digests=absent)
    response = await cache_server.client.in_thread(
        cache_server.client.cas.FindMissingBlobs, everything
    )
    assert list(response.missing_blob_digests) == absent
    twice = re_pb2.FindMissingBlobsRequest(
        instance_name="main", blob_digests=[proto(b) for b in present] * 2
    )
    response = await cache_server.client.in_thread(cache_server.client.cas.FindMissingBlobs, twice)
    assert list(response.missing_blob_digests) == []


async def test_batch_update_then_read_with_per_blob_status(cache_server: ServerHandle) -> None:
    good = b"x" * 1000
    compressible = b"abc" * 10_000
    wrong_hash = re_pb2.BatchUpdateBlobsRequest.Request(digest=proto(b"other"), data=b"data!")
    request = re_pb2.BatchUpdateBlobsRequest(
        requests=[
            re_pb2.BatchUpdateBlobsRequest.Request(digest=proto(good), data=good),
            wrong_hash,
            re_pb2.BatchUpdateBlobsRequest.Request(
                digest=proto(compressible),
                data=zstandard.ZstdCompressor().compress(compressible),
                compressor=ZSTD,
            ),
            re_pb2.BatchUpdateBlobsRequest.Request(
                digest=re_pb2.Digest(hash="zz", size_bytes=1), data=b"a"
            ),
        ]
    )
    response = await cache_server.client.in_thread(
        cache_server.client.cas.BatchUpdateBlobs, request
    )
    codes = [r.status.code for r in response.responses]
    assert codes == [0, grpc.StatusCode.INVALID_ARGUMENT.value[0], 0, 3]
    assert "hashes to" in response.responses[1].status.message
    assert "requests[3].digest.hash" in response.responses[3].status.message

    missing = proto(b"never stored")
    read = re_pb2.BatchReadBlobsRequest(
        digests=[proto(good), missing, proto(compressible)],
        acceptable_compressors=[ZSTD],
    )
    response2 = await cache_server.client.in_thread(cache_server.client.cas.BatchReadBlobs, read)
    assert [r.status.code for r in response2.responses] == [0, 5, 0]
    assert response2.responses[0].data == good
    assert response2.responses[2].data == compressible
    assert response2.responses[1].digest == missing


async def test_batch_read_over_the_limit_names_the_total(cache_server: ServerHandle) -> None:
    digests = [re_pb2.Digest(hash=f"{i:064x}", size_bytes=1_500_000) for i in range(3)]
    with pytest.raises(grpc.RpcError) as info:
        await cache_server.client.in_thread(
            cache_server.client.cas.BatchReadBlobs, re_pb2.BatchReadBlobsRequest(digests=digests)
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "4500000" in info.value.details()


@pytest.mark.parametrize(
    ("digest", "needle"),
    [
        (re_pb2.Digest(hash="g" * 64, size_bytes=1), "blob_digests[1].hash"),
        (re_pb2.Digest(hash="a" * 64, size_bytes=-5), "blob_digests[1].size_bytes: -5"),
        (re_pb2.Digest(hash="A" * 64, size_bytes=1), "blob_digests[1].hash"),
        (re_pb2.Digest(hash="a" * 64, size_bytes=1 << 50), "exceeds"),
    ],
)
async def test_find_missing_rejects_malformed_digests(
    cache_server: ServerHandle, digest: re_pb2.Digest, needle: str
) -> None:
    request = re_pb2.FindMissingBlobsRequest(blob_digests=[proto(b"ok"), digest])
    with pytest.raises(grpc.RpcError) as info:
        await cache_server.client.in_thread(cache_server.client.cas.FindMissingBlobs, request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in info.value.details()


async def test_find_missing_bulk_names_a_bad_digest(cache_server: ServerHandle) -> None:
    good = [proto(f"{i}".encode()) for i in range(200)]
    bad = re_pb2.Digest(hash="a" * 64, size_bytes=-5)
    request = re_pb2.FindMissingBlobsRequest(blob_digests=[*good, bad, *good])
    with pytest.raises(grpc.RpcError) as info:
        await cache_server.client.in_thread(cache_server.client.cas.FindMissingBlobs, request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "blob_digests[200].size_bytes: -5" in info.value.details()


@pytest.mark.parametrize(
    ("hashes", "needle"),
    [
        # Lengths that add up to two good ones: each length is checked.
        (["a" * 63, "a" * 65], "blob_digests[1].hash"),
        (["\u00e9" * 64], "blob_digests[1].hash"),
        (["a" * 32 + "\n" + "a" * 31], "blob_digests[1].hash"),
    ],
)
async def test_find_missing_names_a_hash_the_whole_list_check_refuses(
    cache_server: ServerHandle, hashes: list[str], needle: str
) -> None:
    request = re_pb2.FindMissingBlobsRequest(
        blob_digests=[proto(b"ok"), *(re_pb2.Digest(hash=h, size_bytes=1) for h in hashes)]
    )
    with pytest.raises(grpc.RpcError) as info:
        await cache_server.client.in_thread(cache_server.client.cas.FindMissingBlobs, request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in info.value.details()


async def test_unsupported_digest_function_is_rejected(cache_server: ServerHandle) -> None:
    request = re_pb2.FindMissingBlobsRequest(
        blob_digests=[proto(b"ok")], digest_function=re_pb2.DigestFunction.BLAKE3
    )
    with pytest.raises(grpc.RpcError) as info:
        await cache_server.client.in_thread(cache_server.client.cas.FindMissingBlobs, request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "BLAKE3" in info.value.details()
    # A 40-character hash with no digest_function matches no supported function.
    request = re_pb2.FindMissingBlobsRequest(blob_digests=[re_pb2.Digest(hash="a" * 40)])
    with pytest.raises(grpc.RpcError) as info:
        await cache_server.client.in_thread(cache_server.client.cas.FindMissingBlobs, request)
    assert "40 hex characters" in info.value.details()


def _tree(width: int) -> tuple[list[bytes], re_pb2.Digest, list[re_pb2.Directory]]:
    """A root with ``width`` leaf directories, each holding one distinct file."""
    leaves = []
    for i in range(width):
        leaf = re_pb2.Directory(
            files=[re_pb2.FileNode(name=f"f{i}", digest=proto(f"file {i}".encode()))]
        )
        leaves.append(leaf)
    root = re_pb2.Directory(
        directories=[
            re_pb2.DirectoryNode(name=f"d{i:03}", digest=proto(leaf.SerializeToString()))
            for i, leaf in enumerate(leaves)
        ]
    )
    blobs = [d.SerializeToString() for d in [root, *leaves]]
    return blobs, proto(root.SerializeToString()), [root, *leaves]


async def test_get_tree_pages(cache_server: ServerHandle) -> None:
    blobs, root, expected = _tree(25)
    await upload(cache_server, blobs)
    pages = await cache_server.client.stream(
        cache_server.client.cas.GetTree, re_pb2.GetTreeRequest(root_digest=root, page_size=10)
    )
    assert [len(p.directories) for p in pages] == [10, 10, 6]
    assert [p.next_page_token for p in pages][-1] == ""
    got = [d for p in pages for d in p.directories]
    assert got == expected
    # Resuming from the second page's token returns the rest.
    rest = await cache_server.client.stream(
        cache_server.client.cas.GetTree,
        re_pb2.GetTreeRequest(root_digest=root, page_size=10, page_token=pages[0].next_page_token),
    )
    assert [d for p in rest for d in p.directories] == expected[10:]


async def test_get_tree_errors(cache_server: ServerHandle) -> None:
    with pytest.raises(grpc.RpcError) as info:
        await cache_server.client.stream(
            cache_server.client.cas.GetTree, re_pb2.GetTreeRequest(root_digest=proto(b"absent"))
        )
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    blobs, root, _ = _tree(2)
    await upload(cache_server, blobs)
    for token in ("garbage", "-1"):
        with pytest.raises(grpc.RpcError) as info:
            await cache_server.client.stream(
                cache_server.client.cas.GetTree,
                re_pb2.GetTreeRequest(root_digest=root, page_token=token),
            )
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "page_token" in info.value.details()
