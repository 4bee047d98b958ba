"""FindMissingBlobs and small ByteStream reads answered on the gRPC thread.

Over a filesystem store they never reach the Trio bridge; everything they
cannot answer there (a large read, a file gone behind the store's back, a
compressed read) still takes the bridge and gets the usual answer. And the
answers stay right while the Trio side evicts and writes at the same time.
"""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import trio

from lre.cas import FilesystemStore
from lre.cas._blob_io import write_bytes
from lre.cas.filesystem._inline import INLINE_BYTES
from lre.digest import Digest, digest_of
from lre.proto import bs_pb2, re_pb2
from lre.service import InstanceBackends
from tests._support.reapi import Client
from tests._support.servers import start_server
from tests.service.conftest import ServerHandle


@pytest.fixture
async def fs_server(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[ServerHandle]:
    store = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 512 << 20)
    await store.open()
    address, bridge, instances = await start_server(nursery, {"": InstanceBackends(cas=store)})
    with Client(address) as client:
        yield ServerHandle(address, store, bridge, instances, client)


def _fs(server: ServerHandle) -> FilesystemStore:
    assert isinstance(server.store, FilesystemStore)
    return server.store


def _read_request(d: Digest, offset: int = 0, limit: int = 0) -> bs_pb2.ReadRequest:
    return bs_pb2.ReadRequest(
        resource_name=f"blobs/{d.hash}/{d.size_bytes}", read_offset=offset, read_limit=limit
    )


async def _read(server: ServerHandle, request: bs_pb2.ReadRequest) -> bytes:
    responses = await server.client.stream(server.client.bytestream.Read, request)
    return b"".join(r.data for r in responses)


async def _missing(server: ServerHandle, digests: list[Digest]) -> list[Digest]:
    response = await server.client.in_thread(
        server.client.cas.FindMissingBlobs,
        re_pb2.FindMissingBlobsRequest(blob_digests=[d.to_proto() for d in digests]),
    )
    return [Digest(d.hash, d.size_bytes) for d in response.missing_blob_digests]


async def test_small_reads_and_lookups_do_not_cross_to_trio(fs_server: ServerHandle) -> None:
    cache_server = fs_server
    small = await write_bytes(cache_server.store, b"a header file\n" * 10)
    large_data = os.urandom(INLINE_BYTES + 1)
    large = await write_bytes(cache_server.store, large_data)
    absent = digest_of(b"never stored")
    before = cache_server.bridge.statistics().started_total

    assert await _missing(cache_server, [small, absent, large, absent]) == [absent]
    assert await _read(cache_server, _read_request(small)) == b"a header file\n" * 10
    assert await _read(cache_server, _read_request(small, 3, 5)) == (b"a header file\n" * 10)[3:8]
    assert cache_server.bridge.statistics().started_total == before

    assert await _read(cache_server, _read_request(large)) == large_data  # too large: Trio
    assert cache_server.bridge.statistics().started_total == before + 1


async def test_what_the_grpc_thread_cannot_answer_gets_the_usual_answer(
    fs_server: ServerHandle,
) -> None:
    cache_server = fs_server
    store = _fs(fs_server)
    data = b"removed behind the store's back"
    digest = await write_bytes(store, data)
    path = Path(store.content_path) / digest.hash[:2] / f"{digest.hash}-{digest.size_bytes}"
    path.chmod(0o600)
    path.unlink()
    with pytest.raises(grpc.RpcError) as caught:
        await _read(cache_server, _read_request(digest))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert await _missing(cache_server, [digest]) == [digest]  # the store forgot it

    kept = await write_bytes(store, b"0123456789")
    with pytest.raises(grpc.RpcError) as caught:
        await _read(cache_server, _read_request(kept, 11))
    assert caught.value.code() == grpc.StatusCode.OUT_OF_RANGE
    assert "read_offset: 11" in (caught.value.details() or "")


async def test_answers_stay_right_while_the_store_evicts(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Clients hammer FindMissingBlobs and reads on the gRPC thread while the
    Trio side writes new blobs into a store too small to hold them all, so it
    evicts all the time: every read returns the exact bytes or NOT_FOUND,
    every lookup is a subset of what was written, and the server logs no
    error."""
    store = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 64 << 10)
    await store.open()
    address, _, _ = await start_server(nursery, {"": InstanceBackends(cas=store)})
    client = Client(address)
    blobs = {digest_of(bytes([i]) * 4000): bytes([i]) * 4000 for i in range(60)}
    digests = list(blobs)
    problems: list[str] = []
    stop = threading.Event()

    def hammer(seed: int) -> int:
        calls = 0
        while not stop.is_set():
            chosen = digests[seed % 60 :] + digests[: seed % 60]
            response = client.cas.FindMissingBlobs(
                re_pb2.FindMissingBlobsRequest(blob_digests=[d.to_proto() for d in chosen[:20]])
            )
            if len(response.missing_blob_digests) > 20:
                problems.append("more missing than asked")
            for d in chosen[:3]:
                try:
                    got = b"".join(r.data for r in client.bytestream.Read(_read_request(d)))
                except grpc.RpcError as error:
                    if error.code() != grpc.StatusCode.NOT_FOUND:
                        problems.append(f"read {d}: {error.code()}")
                    continue
                if got != blobs[d]:
                    problems.append(f"read {d}: wrong bytes")
            calls += 1
            seed += 7
        return calls

    async def writer() -> None:
        for _ in range(5):
            for data in blobs.values():
                await write_bytes(store, data)
        stop.set()

    results: list[int] = []

    async def run_hammer(seed: int) -> None:
        results.append(await trio.to_thread.run_sync(hammer, seed))

    try:
        async with trio.open_nursery() as inner:
            for seed in range(3):
                inner.start_soon(run_hammer, seed)
            inner.start_soon(writer)
    finally:
        client.close()
    assert problems == []
    assert sum(results) > 0
    assert store.statistics().evicted_blobs > 0
