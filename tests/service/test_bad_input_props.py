"""Property tests of the request parsers, and random bad requests on a real server.

For any input a parser either returns a valid value or raises
``InvalidArgument`` whose message names the field and stays short; it never
raises anything else. The last test throws random malformed requests at a
running server and checks each gets INVALID_ARGUMENT and the server lives.
"""

from __future__ import annotations

import random
import string
import uuid
from typing import Any

import grpc
import trio
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lre.cas.trees._tree import validate_directory
from lre.digest import MAX_BLOB_SIZE, Digest
from lre.errors import InvalidArgument
from lre.proto import bs_pb2, re_pb2
from lre.service._cas_ops import parse_digests
from lre.service._resource_names import parse_read_resource, parse_write_resource
from tests.service.conftest import ServerHandle

HEX = "0123456789abcdef"
hashes = st.text(HEX, min_size=64, max_size=64)
sizes = st.integers(0, MAX_BLOB_SIZE)
segment = st.text(string.ascii_letters + string.digits + "-_.", min_size=1, max_size=12).filter(
    lambda s: s not in ("blobs", "uploads", "compressed-blobs")
)
instances = st.lists(segment, max_size=3).map("/".join)
anything = st.text(max_size=300) | st.text("/blobsuploadcmprzt0123456789abcdef-", max_size=200)
any_hash = hashes | st.text(max_size=130) | st.text(HEX + "\n ABCDEF", max_size=140)
any_size = st.integers(-(1 << 63), (1 << 63) - 1)


def valid(digest: Digest) -> bool:
    return (
        len(digest.hash) == 64
        and set(digest.hash) <= set(HEX)
        and 0 <= digest.size_bytes <= MAX_BLOB_SIZE
    )


@given(anything)
@settings(max_examples=400)
def test_read_names_parse_or_fail_cleanly(name: str) -> None:
    try:
        resource = parse_read_resource(name)
    except InvalidArgument as error:
        assert error.message.startswith("resource_name ")
        assert len(error.message) < 800
        return
    assert valid(resource.digest) and resource.upload_id is None


@given(anything)
@settings(max_examples=400)
def test_write_names_parse_or_fail_cleanly(name: str) -> None:
    try:
        resource = parse_write_resource(name)
    except InvalidArgument as error:
        assert error.message.startswith("resource_name ")
        assert len(error.message) < 800
        return
    assert valid(resource.digest) and resource.upload_id


@given(instances, hashes, sizes, st.booleans(), st.booleans(), segment)
def test_well_formed_names_round_trip(
    instance: str, hash_hex: str, size: int, compressed: bool, with_function: bool, upload: str
) -> None:
    prefix = f"{instance}/" if instance else ""
    kind = "compressed-blobs/zstd" if compressed else "blobs"
    function = "sha256/" if with_function else ""
    read = parse_read_resource(f"{prefix}{kind}/{function}{hash_hex}/{size}")
    assert (read.instance_name, read.digest, read.compressed) == (
        instance,
        Digest(hash_hex, size),
        compressed,
    )
    write = parse_write_resource(f"{prefix}uploads/{upload}/{kind}/{function}{hash_hex}/{size}/x")
    assert (write.instance_name, write.digest, write.upload_id) == (
        instance,
        Digest(hash_hex, size),
        upload,
    )


@given(st.lists(st.tuples(any_hash, any_size), min_size=1, max_size=6))
@example([("a" * 64 + "\n" + "b" * 64, 1)])  # once passed the fast path as one digest
@settings(max_examples=400)
def test_digest_lists_fast_path_agrees_with_strict_parse(pairs: list[tuple[str, int]]) -> None:
    protos = [re_pb2.Digest(hash=h, size_bytes=s) for h, s in pairs]
    try:
        strict = [Digest.parse(h, s, field=f"x[{i}]") for i, (h, s) in enumerate(pairs)]
    except InvalidArgument:
        strict = None
    try:
        fast = parse_digests(protos, "blob_digests")
    except InvalidArgument as error:
        assert strict is None, pairs
        assert error.message.startswith("blob_digests[")
        return
    assert strict is not None, f"accepted invalid digests {pairs!r}"
    assert fast == strict


names = st.text(max_size=6) | st.sampled_from(["", ".", "..", "a/b", "a\0", "/", "ok"])


@given(st.lists(names, max_size=5), st.lists(names, max_size=3), st.lists(names, max_size=3))
@settings(max_examples=400)
def test_directory_validation_refuses_every_bad_name(
    files: list[str], dirs: list[str], links: list[str]
) -> None:
    empty = re_pb2.Digest(hash="0" * 64, size_bytes=0)
    directory = re_pb2.Directory(
        files=[re_pb2.FileNode(name=n, digest=empty) for n in files],
        directories=[re_pb2.DirectoryNode(name=n, digest=empty) for n in dirs],
        symlinks=[re_pb2.SymlinkNode(name=n, target="t") for n in links],
    )
    every = files + dirs + links
    good = (
        all(n and n not in (".", "..") and "/" not in n and "\0" not in n for n in every)
        and len(set(every)) == len(every)
        and all(group == sorted(group) for group in (files, dirs, links))
    )
    try:
        validate_directory(directory, "under test")
    except InvalidArgument as error:
        assert not good, every
        assert error.message.startswith("directory under test: ")
        return
    assert good, f"accepted {every!r}"


def random_bad_digest(rng: random.Random) -> tuple[str, int]:
    """A digest with a malformed hash (and any size)."""
    length = rng.choice([0, 1, 32, 40, 63, 65, 96, 128, 129])
    hash_hex = "".join(rng.choice(HEX) for _ in range(length))
    if length == 64 or rng.random() < 0.3:
        hash_hex = hash_hex[:10] + rng.choice("G\n/\0 Z\u00e9") + hash_hex[11:64]
    return hash_hex, rng.randrange(-(1 << 63), 1 << 63)


def attempt(call: Any, request: object, streaming: bool) -> tuple[grpc.StatusCode, str]:
    try:
        result = call(request, timeout=10)
        if streaming:
            list(result)
    except grpc.RpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


async def test_random_bad_requests_on_a_real_server(cache_server: ServerHandle) -> None:
    """200 seeded random malformed requests: each INVALID_ARGUMENT, the server lives."""
    client = cache_server.client
    rng = random.Random(20240611)
    for _ in range(200):
        bad_hash, size = random_bad_digest(rng)
        kind = rng.choice(["find", "read", "write", "batch"])
        request: object
        if kind == "find":
            request = re_pb2.FindMissingBlobsRequest(
                blob_digests=[re_pb2.Digest(hash=bad_hash, size_bytes=size)]
            )
            call = client.cas.FindMissingBlobs
        elif kind == "batch":
            request = re_pb2.BatchReadBlobsRequest(
                digests=[re_pb2.Digest(hash=bad_hash, size_bytes=size)]
            )
            call = client.cas.BatchReadBlobs
        elif kind == "read":
            prefix = rng.choice(["", "main/", "a/b/", "uploads/x/"])
            request = bs_pb2.ReadRequest(resource_name=f"{prefix}blobs/{bad_hash}/{abs(size)}")
            call = client.bytestream.Read
        else:
            name = f"uploads/{uuid.uuid4()}/blobs/{bad_hash}/{abs(size) % 1000}"
            request = iter([bs_pb2.WriteRequest(resource_name=name, data=b"x", finish_write=True)])
            call = client.bytestream.Write

        code, message = await trio.to_thread.run_sync(attempt, call, request, kind == "read")
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (kind, bad_hash, size, message)
        assert "internal error" not in message
    response = await client.in_thread(
        client.cas.FindMissingBlobs,
        re_pb2.FindMissingBlobsRequest(blob_digests=[re_pb2.Digest(hash="e" * 64, size_bytes=1)]),
        timeout=10,
    )
    assert len(response.missing_blob_digests) == 1
