"""One-message ByteStream Writes over a filesystem store, written in the
bridge's hop callback (``call_now`` + ``immediate_writes``) with no Trio
request task: the same answers and errors as the task path, and every case
the store cannot do at once (resumed uploads, compressed blobs, a store that
must evict, an fsync store) still takes the task path."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
import trio
import zstandard

from lre.cas import FilesystemStore
from lre.digest import digest_of
from lre.proto import bs_pb2
from lre.service import InstanceBackends
from tests._support.reapi import Client
from tests._support.servers import start_server
from tests.service.conftest import ServerHandle
from tests.service.test_bytestream import read, read_name, upload_name, write, write_requests


@asynccontextmanager
async def _server(
    nursery: trio.Nursery, root: Path, max_bytes: int = 512 << 20, **kwargs: object
) -> AsyncIterator[ServerHandle]:
    store = FilesystemStore(root / "cas", root / "tmp", max_bytes, **kwargs)  # type: ignore[arg-type]
    await store.open()
    address, bridge, instances = await start_server(nursery, {"": InstanceBackends(cas=store)})
    with Client(address) as client:
        yield ServerHandle(address, store, bridge, instances, client)


@pytest.fixture
async def fs_server(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[ServerHandle]:
    async with _server(nursery, tmp_path / "now") as handle:
        yield handle


@pytest.fixture
async def fsync_server(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[ServerHandle]:
    """A store without immediate writes: every Write takes a request task."""
    async with _server(nursery, tmp_path / "fsync", fsync="always") as handle:
        yield handle


def _one(name: str, data: bytes, offset: int = 0) -> Iterator[bs_pb2.WriteRequest]:
    yield bs_pb2.WriteRequest(resource_name=name, write_offset=offset, data=data, finish_write=True)


async def test_a_one_message_write_takes_no_request_task(fs_server: ServerHandle) -> None:
    data = b"#include <stdio.h>\n" * 30
    before = fs_server.bridge.statistics()
    assert await write(fs_server, _one(upload_name(data), data)) == len(data)
    assert await write(fs_server, _one(upload_name(data), data)) == len(data)  # present
    after = fs_server.bridge.statistics()
    assert after.started_total == before.started_total
    assert after.immediate_total == before.immediate_total + 2
    assert await read(fs_server, read_name(data)) == data
    assert await fs_server.store.has_many([digest_of(data)]) == [len(data)]


async def _outcome(server: ServerHandle, requests: Iterator[bs_pb2.WriteRequest]) -> object:
    try:
        return await write(server, requests)
    except grpc.RpcError as error:
        return (error.code(), error.details())


async def test_errors_are_those_of_the_task_path(
    fs_server: ServerHandle, fsync_server: ServerHandle
) -> None:
    data = b"a" * 1000
    uid = "7f9c0e1a-0000-4000-8000-000000000001"
    name = upload_name(data, uid=uid)
    cases = [
        _one(name, b"b" * 1000),  # wrong hash
        _one(name, b"a" * 1001),  # too long
        _one(name, b"a" * 999),  # too short
        _one(name, data, offset=5),  # not at the start of a new upload
        _one(name.replace("/1000", "/-3"), data),  # a bad resource name
    ]
    for requests in cases:
        items = list(requests)
        now = await _outcome(fs_server, iter(items))
        tasked = await _outcome(fsync_server, iter(items))
        assert isinstance(now, tuple) and now[0] == grpc.StatusCode.INVALID_ARGUMENT
        assert now == tasked
    assert await fs_server.store.has_many([digest_of(data)]) == [None]
    assert isinstance(fs_server.store, FilesystemStore)
    assert os.listdir(fs_server.store.temp_path) == []
    started = fsync_server.bridge.statistics().started_total
    assert await write(fsync_server, _one(upload_name(data), data)) == len(data)
    assert fsync_server.bridge.statistics().started_total == started + 1


async def test_what_the_store_cannot_do_at_once_takes_a_request_task(
    fs_server: ServerHandle, nursery: trio.Nursery, tmp_path: Path
) -> None:
    # A resumed upload: the first stream broke off after half the blob.
    data = os.urandom(3000)
    name = upload_name(data)
    with pytest.raises(grpc.RpcError):
        await write(fs_server, write_requests(name, data[:1000], finish=False))
    started = fs_server.bridge.statistics().started_total
    assert await write(fs_server, _one(name, data[1000:], offset=1000)) == len(data)
    assert fs_server.bridge.statistics().started_total == started + 1
    assert await read(fs_server, read_name(data)) == data

    # A new start (offset 0) of an upload id that holds partial data: the
    # task path drops that data as it writes the blob.
    again = os.urandom(2000)
    name = upload_name(again)
    with pytest.raises(grpc.RpcError):
        await write(fs_server, write_requests(name, again[:500], finish=False))
    started = fs_server.bridge.statistics().started_total
    assert await write(fs_server, _one(name, again)) == len(again)
    assert fs_server.bridge.statistics().started_total == started + 1

    # A compressed blob.
    packed = zstandard.ZstdCompressor().compress(b"z" * 5000)
    started = fs_server.bridge.statistics().started_total
    await write(fs_server, _one(upload_name(b"z" * 5000, compressed=True), packed))
    assert fs_server.bridge.statistics().started_total == started + 1
    assert await read(fs_server, read_name(b"z" * 5000)) == b"z" * 5000

    # A store that must evict to take the blob.
    async with _server(nursery, tmp_path / "small", max_bytes=1000) as small:
        old, new = os.urandom(900), os.urandom(300)
        assert await write(small, _one(upload_name(old), old)) == 900
        started = small.bridge.statistics().started_total
        assert await write(small, _one(upload_name(new), new)) == 300
        assert small.bridge.statistics().started_total == started + 1
        assert await small.store.has_many([digest_of(old), digest_of(new)]) == [None, 300]
