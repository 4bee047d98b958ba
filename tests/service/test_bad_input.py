"""Bad input on a real server: every case gets a status naming the field and
the value, nothing wrong is stored, and the server keeps serving.

Each test ends with ``still_serving``: a good upload and read after the bad
calls must work.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
import trio
import zstandard

from lre.cas import ActionResultCache, MemoryActionCache, MemoryStore
from lre.digest import MAX_BLOB_SIZE, Digest, digest_of
from lre.proto import bs_grpc, bs_pb2, re_grpc, re_pb2
from lre.service import GrpcServer, InstanceBackends, Instances, ServerOptions, TrioBridge
from lre.service import cache_servicers as make_cache_servicers
from tests.service.conftest import ServerHandle

GOOD = "a" * 64
CAS = "/build.bazel.remote.execution.v2.ContentAddressableStorage/"
BYTESTREAM = "/google.bytestream.ByteStream/"
AC = "/build.bazel.remote.execution.v2.ActionCache/"


def failure(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[grpc.StatusCode, str]:
    """Call ``fn``; the status code and message it fails with (OK if it does not)."""
    try:
        result = fn(*args, **kwargs)
        if isinstance(result, Iterator):
            list(result)
    except grpc.RpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


async def fails(
    server: ServerHandle, fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> tuple[grpc.StatusCode, str]:
    return await trio.to_thread.run_sync(lambda: failure(fn, *args, timeout=10, **kwargs))


async def still_serving(server: ServerHandle) -> None:
    data = uuid.uuid4().bytes * 10
    d = digest_of(data)
    client = server.client
    request = bs_pb2.WriteRequest(
        resource_name=f"uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}",
        data=data,
        finish_write=True,
    )
    response = await client.in_thread(client.bytestream.Write, iter([request]), timeout=10)
    assert response.committed_size == len(data)
    chunks = await client.stream(
        client.bytestream.Read, bs_pb2.ReadRequest(resource_name=f"blobs/{d.hash}/{d.size_bytes}")
    )
    assert b"".join(c.data for c in chunks) == data


def proto(hash_hex: str, size: int) -> re_pb2.Digest:
    return re_pb2.Digest(hash=hash_hex, size_bytes=size)


# ------------------------------------------------------------ digests

BAD_DIGESTS = [
    (proto("g" * 64, 1), "hash", "'" + "g" * 64 + "'"),
    (proto("A" * 64, 1), "hash", "'" + "A" * 64 + "'"),
    (proto("a" * 63, 1), "hash", "'" + "a" * 63 + "'"),
    (proto("a" * 65, 1), "hash", "'" + "a" * 65 + "'"),
    (proto("", 1), "hash", "''"),
    (proto("a" * 62 + "\u00e9", 1), "hash", "is not a SHA256 hash"),
    (proto(GOOD, -1), "size_bytes", "-1 is negative"),
    (proto(GOOD, -(1 << 63)), "size_bytes", str(-(1 << 63))),
    (proto(GOOD, MAX_BLOB_SIZE + 1), "size_bytes", str(MAX_BLOB_SIZE + 1)),
    (proto(GOOD, (1 << 63) - 1), "size_bytes", str((1 << 63) - 1)),
]


@pytest.mark.parametrize(("digest", "part", "shown"), BAD_DIGESTS)
async def test_malformed_digest_is_named_in_every_cas_call(
    cache_server: ServerHandle, digest: re_pb2.Digest, part: str, shown: str
) -> None:
    client = cache_server.client
    fine = proto(GOOD, 3)
    code, message = await fails(
        cache_server,
        client.cas.FindMissingBlobs,
        re_pb2.FindMissingBlobsRequest(blob_digests=[fine, digest]),
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"blob_digests[1].{part}" in message and shown in message
    code, message = await fails(
        cache_server, client.cas.BatchReadBlobs, re_pb2.BatchReadBlobsRequest(digests=[digest])
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"digests[0].{part}" in message and shown in message
    response = await client.in_thread(
        client.cas.BatchUpdateBlobs,
        re_pb2.BatchUpdateBlobsRequest(
            requests=[
                re_pb2.BatchUpdateBlobsRequest.Request(digest=digest, data=b"abc"),
                re_pb2.BatchUpdateBlobsRequest.Request(
                    digest=digest_of(b"ok").to_proto(), data=b"ok"
                ),
            ]
        ),
        timeout=10,
    )
    status = response.responses[0].status
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert f"requests[0].digest.{part}" in status.message and shown in status.message
    assert response.responses[1].status.code == 0  # the good blob of the batch is stored
    code, message = await fails(
        cache_server,
        client.action_cache.GetActionResult,
        re_pb2.GetActionResultRequest(instance_name="main", action_digest=digest),
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"action_digest.{part}" in message and shown in message
    await still_serving(cache_server)


@pytest.mark.parametrize(
    ("value", "shown"),
    [(42, "unknown value 42"), (3, "MD5 is not supported"), (2, "SHA1 is not supported")],
)
async def test_unknown_or_unsupported_digest_function(
    cache_server: ServerHandle, value: int, shown: str
) -> None:
    client = cache_server.client
    for call, request in (
        (
            client.cas.FindMissingBlobs,
            re_pb2.FindMissingBlobsRequest(
                blob_digests=[proto(GOOD, 1)],
                digest_function=value,  # type: ignore[arg-type]
            ),
        ),
        (
            client.cas.BatchReadBlobs,
            re_pb2.BatchReadBlobsRequest(
                digests=[proto(GOOD, 1)],
                digest_function=value,  # type: ignore[arg-type]
            ),
        ),
    ):
        code, message = await fails(cache_server, call, request)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "digest_function" in message and shown in message
    # A hash of another function's length with the function unset is named too.
    code, message = await fails(
        cache_server,
        client.cas.FindMissingBlobs,
        re_pb2.FindMissingBlobsRequest(blob_digests=[proto("b" * 40, 1)]),
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "digest_function" in message and "40 hex characters" in message
    await still_serving(cache_server)


# ------------------------------------------------------------ batches


async def test_batch_update_data_mismatch_and_bad_compressors(cache_server: ServerHandle) -> None:
    client = cache_server.client
    real = b"the real content"
    wrong_hash = digest_of(b"something else!!")  # same length, other hash
    wrong_size = Digest(digest_of(real).hash, len(real) + 5)
    bomb = zstandard.ZstdCompressor().compress(b"\0" * (4 << 20))
    small = digest_of(b"\0" * 10)
    Req = re_pb2.BatchUpdateBlobsRequest.Request
    requests = [
        Req(digest=wrong_hash.to_proto(), data=real),
        Req(digest=wrong_size.to_proto(), data=real),
        Req(digest=digest_of(real).to_proto(), data=real, compressor=re_pb2.Compressor.DEFLATE),
        Req(digest=digest_of(real).to_proto(), data=real, compressor=99),  # type: ignore[arg-type]
        Req(digest=small.to_proto(), data=bomb, compressor=re_pb2.Compressor.ZSTD),
        Req(digest=digest_of(real).to_proto(), data=b"not zstd", compressor=re_pb2.Compressor.ZSTD),
    ]
    response = await client.in_thread(
        client.cas.BatchUpdateBlobs, re_pb2.BatchUpdateBlobsRequest(requests=requests), timeout=30
    )
    statuses = [r.status for r in response.responses]
    assert all(s.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] for s in statuses), statuses
    assert wrong_hash.hash in statuses[0].message
    assert str(wrong_size.size_bytes) in statuses[1].message
    assert "requests[2].compressor: 2" in statuses[2].message
    assert "requests[3].compressor: 99" in statuses[3].message
    assert str(small) in statuses[4].message and "more than the declared 10 bytes" in (
        statuses[4].message
    )
    assert "does not decompress" in statuses[5].message
    present = await cache_server.store.has_many([wrong_hash, wrong_size, small, digest_of(real)])
    assert present == [None, None, None, None]
    await still_serving(cache_server)


async def test_batch_read_over_the_limit_names_the_total(cache_server: ServerHandle) -> None:
    client = cache_server.client
    digests = [proto(f"{i:064x}", 3_000_000) for i in range(3)]
    code, message = await fails(
        cache_server, client.cas.BatchReadBlobs, re_pb2.BatchReadBlobsRequest(digests=digests)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "9000000 bytes" in message and "max_batch_total_size_bytes" in message
    await still_serving(cache_server)


# ------------------------------------------------------------ ByteStream


def writes(name: str, *pieces: tuple[int, bytes, bool]) -> Iterator[bs_pb2.WriteRequest]:
    for index, (offset, data, finish) in enumerate(pieces):
        yield bs_pb2.WriteRequest(
            resource_name=name if index == 0 else "",
            write_offset=offset,
            data=data,
            finish_write=finish,
        )


async def test_bytestream_data_mismatch_is_not_stored(cache_server: ServerHandle) -> None:
    client = cache_server.client
    claimed = digest_of(b"0123456789")
    name = f"uploads/{uuid.uuid4()}/blobs/{claimed.hash}/{claimed.size_bytes}"
    code, message = await fails(
        cache_server, client.bytestream.Write, writes(name, (0, b"9876543210", True))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert claimed.hash in message
    # Too much data for the declared size: refused as it arrives.
    name = f"uploads/{uuid.uuid4()}/blobs/{claimed.hash}/{claimed.size_bytes}"
    code, message = await fails(
        cache_server, client.bytestream.Write, writes(name, (0, b"01234567890", True))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "data: 11 bytes written exceed the blob's 10 bytes" in message
    # Too little.
    name = f"uploads/{uuid.uuid4()}/blobs/{claimed.hash}/{claimed.size_bytes}"
    code, message = await fails(
        cache_server, client.bytestream.Write, writes(name, (0, b"01234", True))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert (await cache_server.store.has_many([claimed]))[0] is None
    await still_serving(cache_server)


@pytest.mark.parametrize(
    ("pieces", "shown"),
    [
        (((0, b"01234", False), (7, b"789", True)), "write_offset: 7 skips ahead of the 5"),
        (((0, b"01234", False), (3, b"3456789", True)), "write_offset: 3 overlaps the 5"),
        (((5, b"56789", True),), "write_offset: 5 skips ahead of the 0"),
        (((-1, b"0123456789", True),), "write_offset: -1"),
    ],
)
async def test_bytestream_write_offsets_that_skip_or_overlap(
    cache_server: ServerHandle, pieces: tuple[tuple[int, bytes, bool], ...], shown: str
) -> None:
    client = cache_server.client
    d = digest_of(b"0123456789")
    name = f"uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}"
    code, message = await fails(cache_server, client.bytestream.Write, writes(name, *pieces))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert shown in message
    assert (await cache_server.store.has_many([d]))[0] is None
    await still_serving(cache_server)


async def test_bytestream_reads_past_the_end(cache_server: ServerHandle) -> None:
    client = cache_server.client
    data = b"readable"
    d = digest_of(data)
    await client.in_thread(
        client.bytestream.Write,
        writes(f"uploads/u/blobs/{d.hash}/{d.size_bytes}", (0, data, True)),
        timeout=10,
    )
    name = f"blobs/{d.hash}/{d.size_bytes}"
    for offset, limit, code_wanted, shown in (
        (9, 0, grpc.StatusCode.OUT_OF_RANGE, "read_offset: 9 is past the end"),
        (1 << 62, 0, grpc.StatusCode.OUT_OF_RANGE, f"read_offset: {1 << 62}"),
        (-1, 0, grpc.StatusCode.OUT_OF_RANGE, "read_offset: -1 is negative"),
        (0, -5, grpc.StatusCode.INVALID_ARGUMENT, "read_limit: -5 is negative"),
    ):
        code, message = await fails(
            cache_server,
            client.bytestream.Read,
            bs_pb2.ReadRequest(resource_name=name, read_offset=offset, read_limit=limit),
        )
        assert code == code_wanted and shown in message, (offset, limit, message)
    # offset == size: no data, no error; a limit past the end is cut at the end.
    assert await client.stream(
        client.bytestream.Read, bs_pb2.ReadRequest(resource_name=name, read_offset=len(data))
    ) in ([], [bs_pb2.ReadResponse()])
    chunks = await client.stream(
        client.bytestream.Read,
        bs_pb2.ReadRequest(resource_name=name, read_offset=4, read_limit=1000),
    )
    assert b"".join(c.data for c in chunks) == data[4:]
    await still_serving(cache_server)


BAD_READ_NAMES = [
    ("", "expected '{instance}/blobs/{hash}/{size}'"),
    ("blobs", "expected '{hash}/{size}'"),
    (f"blobs/{GOOD}", "expected '{hash}/{size}'"),
    (f"blobs/{GOOD}/-1", "size '-1'"),
    (f"blobs/{GOOD}/1e3", "size '1e3'"),
    (f"blobs/{GOOD}/\u0661", "size '\u0661'"),
    (f"blobs/{GOOD}/99999999999999999999", "size '99999999999999999999'"),
    (f"blobs/{GOOD}/{MAX_BLOB_SIZE + 1}", str(MAX_BLOB_SIZE + 1)),
    (f"blobs/{'G' * 64}/1", "G" * 64),
    (f"blobs/{GOOD[:-1]}/1", GOOD[:-1]),
    (f"blobs/{GOOD}/1/extra", "unexpected segments 'extra'"),
    (f"a//b/blobs/{GOOD}/1", "empty segment"),
    (f"/blobs/{GOOD}/1", "empty segment"),
    (f"uploads/u/blobs/{GOOD}/1", "an upload name cannot be read"),
    (f"compressed-blobs/deflate/{GOOD}/1", "compressor 'deflate' is known but not supported"),
    (f"compressed-blobs/lz4/{GOOD}/1", "compressor 'lz4' is unknown"),
    ("compressed-blobs", "compressor is missing"),
    ("x" * 100_000, "x" * 100),
]


@pytest.mark.parametrize(("name", "shown"), BAD_READ_NAMES)
async def test_malformed_read_resource_names(
    cache_server: ServerHandle, name: str, shown: str
) -> None:
    client = cache_server.client
    code, message = await fails(
        cache_server, client.bytestream.Read, bs_pb2.ReadRequest(resource_name=name)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT, message
    assert "resource_name" in message and shown in message
    assert len(message) < 1000  # a huge name is shortened, not echoed whole
    await still_serving(cache_server)


BAD_WRITE_NAMES = [
    (f"blobs/{GOOD}/1", "a write needs '{instance}/uploads/{uuid}/blobs/{hash}/{size}'"),
    (f"uploads/blobs/{GOOD}/1", "expected 'blobs/' or 'compressed-blobs/' after the upload id"),
    (f"uploads//blobs/{GOOD}/1", "upload id after 'uploads/' is missing"),
    ("uploads/u/blobs", "expected '{hash}/{size}'"),
    (f"uploads/u/blobs/{GOOD}/x", "size 'x'"),
    (f"uploads/u/compressed-blobs/brotli/{GOOD}/1", "compressor 'brotli'"),
    (f"uploads/u/compressed-blobs/snappy/{GOOD}/1", "compressor 'snappy' is unknown"),
    (f"a//uploads/u/blobs/{GOOD}/1", "empty segment"),
]


@pytest.mark.parametrize(("name", "shown"), BAD_WRITE_NAMES)
async def test_malformed_write_resource_names(
    cache_server: ServerHandle, name: str, shown: str
) -> None:
    client = cache_server.client
    code, message = await fails(
        cache_server, client.bytestream.Write, writes(name, (0, b"x", True))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT, message
    assert "resource_name" in message and shown in message
    code, message = await fails(
        cache_server,
        client.bytestream.QueryWriteStatus,
        bs_pb2.QueryWriteStatusRequest(resource_name=name),
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and shown in message
    await still_serving(cache_server)


async def test_unsupported_digest_function_in_a_resource_name(cache_server: ServerHandle) -> None:
    client = cache_server.client
    code, message = await fails(
        cache_server,
        client.bytestream.Read,
        bs_pb2.ReadRequest(resource_name=f"blobs/md5/{'c' * 32}/1"),
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "resource_name" in message and "MD5 is not supported" in message
    await still_serving(cache_server)


async def test_bytestream_zstd_bomb_is_refused(cache_server: ServerHandle) -> None:
    client = cache_server.client
    declared = b"\0" * 1000
    d = digest_of(declared)
    bomb = zstandard.ZstdCompressor().compress(b"\0" * (64 << 20))
    name = f"uploads/{uuid.uuid4()}/compressed-blobs/zstd/{d.hash}/{d.size_bytes}"
    code, message = await fails(
        cache_server, client.bytestream.Write, writes(name, (0, bomb, True))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert str(d) in message and "more than the declared 1000 bytes" in message
    assert (await cache_server.store.has_many([d]))[0] is None
    await still_serving(cache_server)


# ------------------------------------------------------------ trees in the action cache


def tree_with(*names: str, symlink: str = "") -> re_pb2.Tree:
    files = [re_pb2.FileNode(name=n, digest=digest_of(b"").to_proto()) for n in names]
    links = [re_pb2.SymlinkNode(name=symlink, target="x")] if symlink else []
    return re_pb2.Tree(root=re_pb2.Directory(files=files, symlinks=links))


@pytest.mark.parametrize(
    ("tree", "shown"),
    [
        (tree_with(".."), "file name '..' is not allowed"),
        (tree_with("."), "file name '.' is not allowed"),
        (tree_with("a/b"), "file name 'a/b' contains '/' or NUL"),
        (tree_with("a\0b"), "file name 'a\\x00b' contains '/' or NUL"),
        (tree_with(""), "a file has an empty name"),
        (tree_with("a", "a"), "name 'a' appears more than once"),
        (tree_with("a", symlink="a"), "name 'a' appears more than once"),
        (tree_with("b", "a"), "not sorted"),
    ],
)
async def test_output_tree_with_bad_names_is_refused(
    cache_server: ServerHandle, tree: re_pb2.Tree, shown: str
) -> None:
    client = cache_server.client
    data = tree.SerializeToString()
    tree_digest = digest_of(data)
    await client.in_thread(
        client.cas.BatchUpdateBlobs,
        re_pb2.BatchUpdateBlobsRequest(
            requests=[
                re_pb2.BatchUpdateBlobsRequest.Request(digest=tree_digest.to_proto(), data=data)
            ]
        ),
        timeout=10,
    )
    result = re_pb2.ActionResult(
        output_directories=[re_pb2.OutputDirectory(path="out", tree_digest=tree_digest.to_proto())]
    )
    action = digest_of(uuid.uuid4().bytes)
    code, message = await fails(
        cache_server,
        client.action_cache.UpdateActionResult,
        re_pb2.UpdateActionResultRequest(
            instance_name="main", action_digest=action.to_proto(), action_result=result
        ),
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert str(tree_digest) in message and shown in message
    code, _ = await fails(
        cache_server,
        client.action_cache.GetActionResult,
        re_pb2.GetActionResultRequest(instance_name="main", action_digest=action.to_proto()),
    )
    assert code == grpc.StatusCode.NOT_FOUND
    await still_serving(cache_server)


# ------------------------------------------------------------ bytes that are not protobuf

GARBAGE = [b"\xff\xff\xff\xff", b"\x0a\xff\xff\xff\xff\x0f", b"\x08" + b"\xff" * 11, b"\x0a\x05ab"]


@pytest.mark.parametrize("payload", GARBAGE)
@pytest.mark.parametrize(
    "method",
    [
        CAS + "FindMissingBlobs",
        CAS + "BatchUpdateBlobs",
        CAS + "BatchReadBlobs",
        AC + "GetActionResult",
        AC + "UpdateActionResult",
        "/build.bazel.remote.execution.v2.Capabilities/GetCapabilities",
    ],
)
async def test_unparsable_protobuf_unary(
    cache_server: ServerHandle, method: str, payload: bytes
) -> None:
    call = cache_server.client.channel.unary_unary(method, None, None)
    code, message = await fails(cache_server, call, payload)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, message)
    request_type = method.rsplit("/", 1)[-1] + "Request"
    assert f"request: {len(payload)} bytes do not parse as " in message
    assert request_type in message
    assert "DecodeError" not in message and "Wire format" not in message
    await still_serving(cache_server)


@pytest.mark.parametrize("payload", GARBAGE)
async def test_unparsable_protobuf_streams(cache_server: ServerHandle, payload: bytes) -> None:
    channel = cache_server.client.channel
    read = channel.unary_stream(BYTESTREAM + "Read", None, None)
    code, message = await fails(cache_server, read, payload)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "do not parse as google.bytestream.ReadRequest" in message
    write = channel.stream_unary(BYTESTREAM + "Write", None, None)
    code, message = await fails(cache_server, write, iter([payload, payload]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "WriteRequest" in message and "parse" in message
    # A good first request followed by garbage: the partial upload is refused too.
    d = digest_of(b"0123456789")
    first = bs_pb2.WriteRequest(
        resource_name=f"uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}", data=b"01234"
    ).SerializeToString()
    code, message = await fails(cache_server, write, iter([first, payload]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "WriteRequest" in message
    tree = channel.unary_stream(CAS + "GetTree", None, None)
    code, message = await fails(cache_server, tree, payload)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "GetTreeRequest" in message
    await still_serving(cache_server)


# ------------------------------------------------------------ oversized messages


async def test_oversized_messages_are_refused(nursery: trio.Nursery) -> None:
    store = MemoryStore(max_bytes=64 << 20)
    results = ActionResultCache(MemoryActionCache(), store)
    bridge = TrioBridge()
    instances = Instances({"": InstanceBackends(cas=store, action_cache=results)})
    options = ServerOptions(address="127.0.0.1:0", grace_seconds=0.2, max_message_bytes=1 << 20)
    server = GrpcServer(options, make_cache_servicers(bridge, instances), bridge)
    address: str = await nursery.start(server.serve)
    big = b"z" * (2 << 20)
    with grpc.insecure_channel(
        address, options=[("grpc.max_send_message_length", 64 << 20)]
    ) as channel:
        cas = re_grpc.ContentAddressableStorageStub(channel)
        request = re_pb2.BatchUpdateBlobsRequest(
            requests=[
                re_pb2.BatchUpdateBlobsRequest.Request(digest=digest_of(big).to_proto(), data=big)
            ]
        )
        code, message = await trio.to_thread.run_sync(
            lambda: failure(cas.BatchUpdateBlobs, request, timeout=10)
        )
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, message
        bytestream = bs_grpc.ByteStreamStub(channel)
        d = digest_of(big)
        one_piece = writes(f"uploads/u/blobs/{d.hash}/{d.size_bytes}", (0, big, True))
        code, _ = await trio.to_thread.run_sync(
            lambda: failure(bytestream.Write, one_piece, timeout=10)
        )
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        # Split into pieces below the limit, the same blob goes through.
        pieces = [(i, big[i : i + (512 << 10)], i + (512 << 10) >= len(big)) for i in
                  range(0, len(big), 512 << 10)]  # fmt: skip
        response = await trio.to_thread.run_sync(
            lambda: bytestream.Write(
                writes(f"uploads/v/blobs/{d.hash}/{d.size_bytes}", *pieces), timeout=10
            )
        )
        assert response.committed_size == len(big)
        # A huge FindMissingBlobs (over the message limit) is refused too.
        many = re_pb2.FindMissingBlobsRequest(
            blob_digests=[proto(f"{i:064x}", i) for i in range(20_000)]
        )
        code, _ = await trio.to_thread.run_sync(
            lambda: failure(cas.FindMissingBlobs, many, timeout=10)
        )
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        # And the server still answers.
        small = re_pb2.FindMissingBlobsRequest(blob_digests=[proto(GOOD, 1)])
        answer = await trio.to_thread.run_sync(lambda: cas.FindMissingBlobs(small, timeout=10))
        assert len(answer.missing_blob_digests) == 1
