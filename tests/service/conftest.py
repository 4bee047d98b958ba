"""A real lre gRPC server on 127.0.0.1 and a real grpc client for service tests.

``cache_server`` starts ``GrpcServer`` with the cache servicers over a
``MemoryStore`` and again over a ``FilesystemStore`` (which answers
FindMissingBlobs and small reads on the gRPC thread) in the test's Trio
nursery (stopped when the test ends), via
``tests._support.servers.start_server``. Its client is the blocking
``tests._support.reapi.Client``; the tests call it through
``Client.in_thread`` / ``Client.stream`` so the Trio loop - which also runs
the server's Trio side - never blocks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from lre.cas import ActionResultCache, BlobStore, FilesystemStore, MemoryActionCache, MemoryStore
from lre.service import InstanceBackends, Instances, TrioBridge
from tests._support.reapi import Client
from tests._support.servers import start_server

#: Instance names the ``cache_server`` serves: "" (no action cache), "main"
#: (action cache) and "team/linux/x86" (read-only action cache).
SERVED_INSTANCES = ("", "main", "team/linux/x86")


@dataclass
class ServerHandle:
    address: str
    store: BlobStore
    bridge: TrioBridge
    instances: Instances
    client: Client


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
    with Client(address) as client:
        yield ServerHandle(address, store, bridge, instances, client)


async def eventually(predicate: Callable[[], bool], seconds: float = 5.0) -> None:
    """Wait until ``predicate()`` holds (polling), failing after ``seconds``."""
    for _ in range(int(seconds / 0.01)):
        if predicate():
            return
        await trio.sleep(0.01)
    assert predicate(), f"condition did not hold within {seconds} s"
