"""ByteStream Read / Write / QueryWriteStatus through a real server and client."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator

import grpc
import pytest
import trio
import zstandard

from lre.digest import digest_of
from lre.proto import bs_pb2
from tests.service.conftest import ServerHandle, eventually

CHUNK = 64 << 10


def upload_name(data: bytes, instance: str = "", *, compressed: bool = False, uid: str = "") -> str:
    d = digest_of(data)
    prefix = f"{instance}/" if instance else ""
    kind = "compressed-blobs/zstd" if compressed else "blobs"
    return f"{prefix}uploads/{uid or uuid.uuid4()}/{kind}/{d.hash}/{d.size_bytes}"


def read_name(data: bytes, instance: str = "", *, compressed: bool = False) -> str:
    d = digest_of(data)
    prefix = f"{instance}/" if instance else ""
    kind = "compressed-blobs/zstd" if compressed else "blobs"
    return f"{prefix}{kind}/{d.hash}/{d.size_bytes}"


def write_requests(
    name: str, payload: bytes, *, offset: int = 0, finish: bool = True
) -> Iterator[bs_pb2.WriteRequest]:
    pieces = [payload[i : i + CHUNK] for i in range(0, len(payload), CHUNK)] or [b""]
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        yield bs_pb2.WriteRequest(
            resource_name=name if index == 0 else "",
            write_offset=offset,
            data=piece,
            finish_write=finish and last,
        )
        offset += len(piece)


async def write(server: ServerHandle, requests: Iterator[bs_pb2.WriteRequest]) -> int:
    response = await server.client.in_thread(server.client.bytestream.Write, requests)
    return int(response.committed_size)


async def read(server: ServerHandle, name: str, offset: int = 0, limit: int = 0) -> bytes:
    responses = await server.client.stream(
        server.client.bytestream.Read,
        bs_pb2.ReadRequest(resource_name=name, read_offset=offset, read_limit=limit),
    )
    return b"".join(r.data for r in responses)


async def test_write_then_read_with_offsets(cache_server: ServerHandle) -> None:
    data = os.urandom(300_000)
    name = upload_name(data, "team/linux/x86")
    assert await write(cache_server, write_requests(name, data)) == len(data)
    rname = read_name(data, "team/linux/x86")
    assert await read(cache_server, rname) == data
    assert await read(cache_server, rname, offset=1000, limit=5000) == data[1000:6000]
    assert await read(cache_server, rname, offset=len(data)) == b""
    # The digest-function segment is accepted.
    d = digest_of(data)
    assert await read(cache_server, f"team/linux/x86/blobs/sha256/{d.hash}/{d.size_bytes}") == data


async def test_read_range_errors(cache_server: ServerHandle) -> None:
    data = b"0123456789"
    await write(cache_server, write_requests(upload_name(data), data))
    cases = [
        (-1, 0, grpc.StatusCode.OUT_OF_RANGE, "read_offset: -1"),
        (11, 0, grpc.StatusCode.OUT_OF_RANGE, "read_offset: 11"),
        (0, -1, grpc.StatusCode.INVALID_ARGUMENT, "read_limit: -1"),
    ]
    for offset, limit, code, needle in cases:
        with pytest.raises(grpc.RpcError) as info:
            await read(cache_server, read_name(data), offset, limit)
        assert info.value.code() == code
        assert needle in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        await read(cache_server, read_name(b"absent"))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_write_mismatch_is_rejected_and_nothing_stored(cache_server: ServerHandle) -> None:
    data = b"a" * 1000
    name = upload_name(data)
    with pytest.raises(grpc.RpcError) as info:
        await write(cache_server, write_requests(name, b"b" * 1000))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "hashes to" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        await write(cache_server, write_requests(name, b"a" * 1001))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as info:
        await write(cache_server, write_requests(name, b"a" * 999))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (await cache_server.store.has_many([digest_of(data)])) == [None]


async def test_resumable_upload(cache_server: ServerHandle) -> None:
    data = os.urandom(5 * CHUNK + 123)
    name = upload_name(data, "main")
    half = 2 * CHUNK
    # First stream ends without finish_write: the server keeps what arrived.
    with pytest.raises(grpc.RpcError) as info:
        await write(cache_server, write_requests(name, data[:half], finish=False))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"resume with write_offset {half}" in info.value.details()
    status = await cache_server.client.in_thread(
        cache_server.client.bytestream.QueryWriteStatus,
        bs_pb2.QueryWriteStatusRequest(resource_name=name),
    )
    assert (status.committed_size, status.complete) == (half, False)
    # Skipping and overlapping offsets are rejected naming both offsets ...
    for bad in (half + 10, half - 10):
        with pytest.raises(grpc.RpcError) as info:
            await write(cache_server, write_requests(name, data[bad:], offset=bad))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"write_offset: {bad}" in info.value.details()
        assert str(half) in info.value.details()
        # ... and such an error discards the partial upload: start again.
        with pytest.raises(grpc.RpcError):
            await write(cache_server, write_requests(name, data[:half], finish=False))
    assert await write(cache_server, write_requests(name, data[half:], offset=half)) == len(data)
    assert await read(cache_server, read_name(data, "main")) == data
    status = await cache_server.client.in_thread(
        cache_server.client.bytestream.QueryWriteStatus,
        bs_pb2.QueryWriteStatusRequest(resource_name=name),
    )
    assert (status.committed_size, status.complete) == (len(data), True)


async def test_write_of_present_blob_returns_early(cache_server: ServerHandle) -> None:
    data = os.urandom(200_000)
    await write(cache_server, write_requests(upload_name(data), data))

    def stream() -> Iterator[bs_pb2.WriteRequest]:
        yield bs_pb2.WriteRequest(resource_name=upload_name(data), data=data[:CHUNK])
        # The server answers before the rest; this must not be needed.
        yield bs_pb2.WriteRequest(write_offset=CHUNK, data=data[CHUNK:], finish_write=True)

    assert await write(cache_server, stream()) == len(data)
    compressed_name = upload_name(data, compressed=True)
    assert await write(cache_server, write_requests(compressed_name, b"whatever")) == -1


async def test_zstd_both_directions(cache_server: ServerHandle) -> None:
    data = b"compress me please " * 50_000
    packed = zstandard.ZstdCompressor(level=3).compress(data)
    name = upload_name(data, compressed=True)
    committed = await write(cache_server, write_requests(name, packed))
    assert committed == len(packed)
    assert await read(cache_server, read_name(data)) == data
    compressed = await read(cache_server, read_name(data, compressed=True))
    assert len(compressed) < len(data) // 10
    assert zstandard.ZstdDecompressor().decompressobj().decompress(compressed) == data
    assert await read(cache_server, read_name(data, compressed=True), offset=7) == compressed[7:]
    with pytest.raises(grpc.RpcError) as info:
        await read(cache_server, read_name(data, compressed=True), limit=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "read_limit: 10" in info.value.details()


async def test_zstd_bomb_is_rejected(cache_server: ServerHandle) -> None:
    declared = b"x" * 1000
    bomb = zstandard.ZstdCompressor().compress(b"\0" * (256 << 20))
    assert len(bomb) < 64 << 10
    name = upload_name(declared, compressed=True)
    with pytest.raises(grpc.RpcError) as info:
        await write(cache_server, write_requests(name, bomb))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "more than the declared 1000 bytes" in info.value.details()
    garbage = upload_name(declared, compressed=True)
    with pytest.raises(grpc.RpcError) as info:
        await write(cache_server, write_requests(garbage, b"not zstd at all"))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert await cache_server.store.has_many([digest_of(declared)]) == [None]


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("blobs/abc/10", "'abc' is not a SHA256 hash"),
        ("main/blobs/" + "a" * 64 + "/-1", "size '-1'"),
        ("main/blobs/" + "a" * 64 + "/1x", "size '1x'"),
        ("main/blobs/" + "a" * 64, "expected '{hash}/{size}'"),
        ("main//blobs/" + "a" * 64 + "/1", "empty segment"),
        ("main/compressed-blobs/deflate/" + "a" * 64 + "/1", "'deflate' is known but not"),
        ("main/compressed-blobs/lz4/" + "a" * 64 + "/1", "'lz4' is unknown"),
        ("main/blobs/blake3/" + "a" * 64 + "/1", "BLAKE3 is not supported"),
        ("main/uploads/u/blobs/" + "a" * 64 + "/1", "upload name cannot be read"),
        ("main/blobs/" + "a" * 64 + "/1/extra", "unexpected segments 'extra'"),
        ("nothing here", "expected '{instance}/blobs"),
        ("other/blobs/" + "a" * 64 + "/1", "instance_name: 'other'"),
    ],
)
async def test_bad_read_names(cache_server: ServerHandle, name: str, needle: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        await read(cache_server, name)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in info.value.details()


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("main/blobs/" + "a" * 64 + "/1", "a write needs"),
        ("main/uploads//blobs/" + "a" * 64 + "/1", "upload id"),
        ("main/uploads/u1/" + "a" * 64 + "/1", "expected 'blobs/'"),
        ("main/uploads/u1/blobs/" + "a" * 63 + "/1", "is not a SHA256 hash"),
    ],
)
async def test_bad_write_names(cache_server: ServerHandle, name: str, needle: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        await write(cache_server, write_requests(name, b"a"))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in info.value.details()


async def test_write_with_trailing_metadata_segments(cache_server: ServerHandle) -> None:
    data = b"metadata after the size is allowed on uploads"
    name = upload_name(data, "main") + "/some/metadata"
    assert await write(cache_server, write_requests(name, data)) == len(data)


async def test_abandoned_read_cancels_trio_side(cache_server: ServerHandle) -> None:
    data = os.urandom(32 << 20)
    await write(cache_server, write_requests(upload_name(data), data))

    def read_first_chunk() -> bytes:
        request = bs_pb2.ReadRequest(resource_name=read_name(data))
        call = cache_server.client.bytestream.Read(request)
        first = next(call)
        call.cancel()
        return bytes(first.data)

    first = await trio.to_thread.run_sync(read_first_chunk)
    assert first == data[: len(first)]
    await eventually(lambda: cache_server.bridge.statistics().running == 0)
    assert cache_server.bridge.statistics().cancelled_total >= 1


async def test_write_request_that_does_not_parse(cache_server: ServerHandle) -> None:
    method = cache_server.client.channel.stream_unary("/google.bytestream.ByteStream/Write")
    with pytest.raises(grpc.RpcError) as info:
        await cache_server.client.in_thread(method, iter([b"\x0a\xff\xff\xff\x0f"]))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "do not parse as google.bytestream.WriteRequest" in info.value.details()


async def test_write_cut_off_mid_stream_resumes(cache_server: ServerHandle) -> None:
    """A client that vanishes while the store is taking the data can resume it.

    The blob streams into the store as it arrives; the cut-off store write
    leaves nothing visible, and the data that arrived stays resumable.
    """
    data = os.urandom(6 * CHUNK)
    name = upload_name(data)
    sent = trio.Semaphore(0)
    release = threading.Event()
    token = trio.lowlevel.current_trio_token()

    def first_half() -> Iterator[bs_pb2.WriteRequest]:
        for index, request in enumerate(write_requests(name, data)):
            if index == 3:
                token.run_sync_soon(sent.release)
                release.wait(10)
                return
            yield request

    future = cache_server.client.bytestream.Write.future(first_half())
    await sent.acquire()

    async def committed() -> int:
        status = await cache_server.client.in_thread(
            cache_server.client.bytestream.QueryWriteStatus,
            bs_pb2.QueryWriteStatusRequest(resource_name=name),
        )
        return int(status.committed_size)

    for _ in range(500):
        if await committed() == 3 * CHUNK:
            break
        await trio.sleep(0.01)
    future.cancel()
    release.set()
    await eventually(lambda: cache_server.bridge.statistics().running == 0)
    assert await committed() == 3 * CHUNK
    assert (await cache_server.store.has_many([digest_of(data)])) == [None]
    resumed = write_requests(name, data[3 * CHUNK :], offset=3 * CHUNK)
    assert await write(cache_server, resumed) == len(data)
    assert await read(cache_server, read_name(data)) == data
