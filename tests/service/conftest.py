"""A real lre gRPC server on 127.0.0.1 and a real grpc client for service tests.

``cache_server`` starts ``GrpcServer`` with the cache servicers over a
``MemoryStore`` and again over a ``FilesystemStore`` (which answers
FindMissingBlobs and small reads on the gRPC thread) in the test's Trio
nursery (stopped when the test ends). The
client is a synchronous grpc channel whose calls run in worker threads
(``trio.to_thread``), so the Trio loop - which also runs the server's Trio
side - never blocks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
import trio

from lre.cas import ActionResultCache, BlobStore, FilesystemStore, MemoryActionCache, MemoryStore
from lre.proto import bs_grpc, re_grpc
from lre.service import (
    CacheServiceOptions,
    GrpcServer,
    InstanceBackends,
    Instances,
    ServerOptions,
    Servicer,
    TrioBridge,
    cache_servicers,
)

T = TypeVar("T")

#: Instance names the ``cache_server`` serves: "" (no action cache), "main"
#: (action cache) and "team/linux/x86" (read-only action cache).
SERVED_INSTANCES = ("", "main", "team/linux/x86")


@dataclass
class Client:
    """Stubs on one channel; ``run`` calls a blocking function in a thread."""

    address: str
    channel: grpc.Channel
    cas: Any = field(init=False)
    bytestream: Any = field(init=False)
    capabilities: Any = field(init=False)
    action_cache: Any = field(init=False)

    def __post_init__(self) -> None:
        self.cas = re_grpc.ContentAddressableStorageStub(self.channel)
        self.bytestream = bs_grpc.ByteStreamStub(self.channel)
        self.capabilities = re_grpc.CapabilitiesStub(self.channel)
        self.action_cache = re_grpc.ActionCacheStub(self.channel)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))

    async def stream(self, fn: Callable[..., Iterator[T]], *args: Any) -> list[T]:
        return await trio.to_thread.run_sync(lambda: list(fn(*args)))


@dataclass
class ServerHandle:
    address: str
    store: BlobStore
    bridge: TrioBridge
    instances: Instances
    client: Client


def open_channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(
        address,
        options=[
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.max_send_message_length", 64 << 20),
        ],
    )


async def start_server(
    nursery: trio.Nursery,
    backends: dict[str, InstanceBackends],
    *,
    options: CacheServiceOptions | None = None,
    extra: Callable[[TrioBridge], list[Servicer]] | None = None,
) -> tuple[str, TrioBridge, Instances]:
    instances = Instances(backends)
    bridge = TrioBridge()
    servicers: list[Servicer] = list(cache_servicers(bridge, instances, options))
    if extra is not None:
        servicers.extend(extra(bridge))
    server = GrpcServer(ServerOptions(address="127.0.0.1:0", grace_seconds=0.5), servicers, bridge)
    address: str = await nursery.start(server.serve)
    return address, bridge, instances


@pytest.fixture(params=["memory", "filesystem"])
async def cache_server(
    nursery: trio.Nursery, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ServerHandle]:
    store: BlobStore
    if request.param == "memory":
        store = MemoryStore(max_bytes=512 << 20)
    else:
        filesystem = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 512 << 20)
        await filesystem.open()
        store = filesystem
    results = ActionResultCache(MemoryActionCache(), store)
    backends = {
        "": InstanceBackends(cas=store),
        "main": InstanceBackends(cas=store, action_cache=results),
        "team/linux/x86": InstanceBackends(cas=store, action_cache=results, ac_read_only=True),
    }
    address, bridge, instances = await start_server(nursery, backends)
    channel = open_channel(address)
    try:
        yield ServerHandle(address, store, bridge, instances, Client(address, channel))
    finally:
        channel.close()


async def eventually(predicate: Callable[[], bool], seconds: float = 5.0) -> None:
    """Wait until ``predicate()`` holds (polling), failing after ``seconds``."""
    for _ in range(int(seconds / 0.01)):
        if predicate():
            return
        await trio.sleep(0.01)
    assert predicate(), f"condition did not hold within {seconds} s"
