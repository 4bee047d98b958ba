"""GrpcStore against a real lre server (the "cluster") on 127.0.0.1."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from lre.cas import FastSlowStore, GrpcStore, MemoryStore, read_bytes
from lre.cas._blob_io import write_bytes
from lre.config import EndpointSpec, RetrySpec
from lre.digest import EMPTY_DIGEST, digest_of
from lre.errors import InvalidArgument, NotFound, OutOfRange
from lre.upstream import UpstreamClient, UpstreamUnavailable
from tests._support.configs import config_of
from tests.upstream._cluster import MetadataRecorder, UpstreamLre, upstream_config_text

FAST_RETRY = RetrySpec(max_retries=1, delay=0.01, max_delay=0.02)


def client_for(address: str, **kwargs: object) -> UpstreamClient:
    options: dict[str, object] = {"retry": FAST_RETRY}
    options.update(kwargs)
    return UpstreamClient([EndpointSpec(address=address)], name="test", **options)  # type: ignore[arg-type]


@pytest.fixture
async def cluster(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[UpstreamLre]:
    upstream = UpstreamLre(config_of(upstream_config_text(tmp_path / "cluster")))
    await upstream.start(nursery)
    yield upstream
    await upstream.stop()


@pytest.fixture
async def store(cluster: UpstreamLre) -> AsyncIterator[GrpcStore]:
    grpc_store = GrpcStore(client_for(cluster.url), instance_name="team")
    yield grpc_store
    await grpc_store.aclose()


async def chunks_of(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_small_blob_round_trip_and_has_many(store: GrpcStore) -> None:
    data = b"hello upstream"
    digest = digest_of(data)
    absent = digest_of(b"nobody wrote this")
    assert await store.has_many([digest, absent, EMPTY_DIGEST]) == [None, None, 0]
    await store.write(digest, chunks_of(data, 3))
    assert await store.has_many([digest, absent, digest]) == [len(data), None, len(data)]
    assert await read_bytes(store, digest) == data
    parts = [c async for c in store.read(digest, 6, 4)]
    assert b"".join(parts) == b"upst"
    with pytest.raises(NotFound):
        await read_bytes(store, absent)
    with pytest.raises(OutOfRange):
        await read_bytes_from(store, digest, len(data) + 1)
    assert [c async for c in store.read(EMPTY_DIGEST)] == []


async def read_bytes_from(store: GrpcStore, digest: object, offset: int) -> bytes:
    return b"".join([c async for c in store.read(digest, offset)])  # type: ignore[arg-type]


async def test_large_blob_uses_bytestream_both_ways(store: GrpcStore, cluster: UpstreamLre) -> None:
    data = os.urandom(5 << 20)  # above the advertised 4,000,000-byte batch limit
    digest = digest_of(data)
    await store.write(digest, chunks_of(data, 300_000))
    assert await store.has_many([digest]) == [len(data)]
    assert await read_bytes(store, digest) == data
    middle = b"".join([c async for c in store.read(digest, 1_000_000, 2_500_000)])
    assert middle == data[1_000_000:3_500_000]
    # The blob is in the cluster's own CAS (a plain server-side check).
    cluster_cas = cluster.app.stores.blob("cas")
    assert await cluster_cas.has_many([digest]) == [len(data)]
    # Writing it again is cheap and fine (the upstream may end the stream early).
    await store.write(digest, chunks_of(data, 1 << 20))


async def test_wrong_size_write_is_refused(store: GrpcStore) -> None:
    data = b"x" * 100
    digest = digest_of(data)
    with pytest.raises(InvalidArgument):
        await store.write(digest, chunks_of(data[:50], 10))
    assert await store.has_many([digest]) == [None]


async def test_find_missing_is_chunked(cluster: UpstreamLre) -> None:
    recorder_store = GrpcStore(client_for(cluster.url), find_missing_chunk=3)
    try:
        blobs = [f"blob {i}".encode() for i in range(8)]
        for blob in blobs[::2]:
            await write_bytes(recorder_store, blob)
        sizes = await recorder_store.has_many([digest_of(b) for b in blobs])
        assert sizes == [len(b) if i % 2 == 0 else None for i, b in enumerate(blobs)]
    finally:
        await recorder_store.aclose()


async def test_headers_are_sent_as_metadata(tmp_path: Path, nursery: trio.Nursery) -> None:
    recorder = MetadataRecorder(token="s3cret")
    cluster = UpstreamLre(config_of(upstream_config_text(tmp_path / "c")), interceptor=recorder)
    await cluster.start(nursery)
    good = GrpcStore(client_for(cluster.url, headers={"Authorization": "Bearer s3cret"}))
    bad_client = client_for(cluster.url, headers={"authorization": "Bearer wrong"})
    bad = GrpcStore(bad_client, degrade=False)
    try:
        digest = await write_bytes(good, b"authorized")
        assert await good.has_many([digest]) == [10]
        assert recorder.calls and all(
            md.get("authorization") == "Bearer s3cret" for _, md in recorder.calls
        )
        with pytest.raises(UpstreamUnavailable, match="UNAUTHENTICATED"):
            await bad.has_many([digest])
        assert recorder.refused >= 1
        assert bad.upstream_statistics().state == "down"
    finally:
        await good.aclose()
        await bad.aclose()
        await cluster.stop()


async def test_unreachable_upstream_degrades(tmp_path: Path, nursery: trio.Nursery) -> None:
    cluster = UpstreamLre(config_of(upstream_config_text(tmp_path / "c")))
    await cluster.start(nursery)
    upstream = GrpcStore(client_for(cluster.url))
    fast = MemoryStore(1 << 20)
    tiered = FastSlowStore(fast, upstream)
    try:
        only_upstream = await write_bytes(upstream, b"only upstream")
        assert upstream.upstream_statistics().state == "up"
        await cluster.stop()
        # Local data keeps being served; upstream-only data reads as absent.
        local = await write_bytes(tiered, b"written while down")  # upstream copy dropped
        assert await read_bytes(tiered, local) == b"written while down"
        assert await tiered.has_many([local, only_upstream]) == [18, None]
        with pytest.raises(NotFound, match="cannot be reached"):
            await read_bytes(tiered, only_upstream)
        stats = upstream.upstream_statistics()
        assert stats.state == "down" and not stats.healthy and stats.transitions_down == 1
        assert upstream.dropped_writes >= 1
        # While the circuit is open the upstream is not even tried.
        calls = stats.calls
        await tiered.has_many([only_upstream])
        assert upstream.upstream_statistics().calls == calls
        # A strict view raises instead.
        with pytest.raises(UpstreamUnavailable):
            await upstream.strict().has_many([only_upstream])
    finally:
        await upstream.aclose()


async def test_upstream_coming_back_closes_the_circuit(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    cluster = UpstreamLre(config_of(upstream_config_text(tmp_path / "c")))
    await cluster.start(nursery)
    port = int(cluster.address.rsplit(":", 1)[1])
    client = client_for(cluster.url)
    client.health.base_backoff_s = 0.2
    upstream = GrpcStore(client)
    try:
        digest = await write_bytes(upstream, b"persisted on disk")
        await cluster.stop()
        assert await upstream.has_many([digest]) == [None]
        assert upstream.upstream_statistics().state == "down"
        # Same port, same directory: the blob is still there after the restart.
        again = UpstreamLre(config_of(upstream_config_text(tmp_path / "c", port=port)))
        await again.start(nursery)
        with trio.fail_after(20):
            for _ in range(200):  # polls: the client notices on its next try
                if await upstream.has_many([digest]) == [17]:
                    break
                await trio.sleep(0.1)
        assert upstream.upstream_statistics().state == "up"
        await again.stop()
    finally:
        await upstream.aclose()


async def test_bounded_concurrency_and_pool(cluster: UpstreamLre) -> None:
    client = client_for(cluster.url, max_concurrent_requests=3, connections_per_endpoint=2)
    upstream = GrpcStore(client)
    try:
        blobs = [os.urandom(1000) for _ in range(40)]
        peak = 0

        async def one(blob: bytes) -> None:
            nonlocal peak
            await write_bytes(upstream, blob)
            peak = max(peak, client.limiter.borrowed_tokens)

        async with trio.open_nursery() as inner:
            for blob in blobs:
                inner.start_soon(one, blob)
        assert peak <= 3
        assert len(client._pools[0]) == 2
        assert await upstream.has_many([digest_of(b) for b in blobs]) == [1000] * 40
    finally:
        await upstream.aclose()
