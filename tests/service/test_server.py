"""GrpcServer: the thread grpc.aio runs on carries lre's name."""

from __future__ import annotations

from pathlib import Path

from tests.service.conftest import ServerHandle


def kernel_names() -> set[str]:
    names = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            names.add((task / "comm").read_text().strip())
        except OSError:  # the thread ended meanwhile
            continue
    return names


async def test_grpc_asyncio_thread_is_named(cache_server: ServerHandle) -> None:
    assert "lre-grpc-aio" in kernel_names()
