"""name_os_thread: the kernel shows the names lre gives its threads."""

from __future__ import annotations

import threading
from pathlib import Path

import trio

from lre.upstream import UpstreamLoop, name_os_thread


def kernel_name(native_id: int | None) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().strip()


def test_names_the_calling_thread_cut_to_fifteen_bytes() -> None:
    seen: dict[str, str] = {}

    def body() -> None:
        name_os_thread("lre-a-rather-long-thread-name")
        seen["self"] = kernel_name(threading.get_native_id())

    before = kernel_name(threading.get_native_id())
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen["self"] == "lre-a-rather-lo"
    assert kernel_name(threading.get_native_id()) == before  # only the caller is renamed


async def test_upstream_loop_thread_carries_its_name() -> None:
    loop = UpstreamLoop(name="lre-upstream-t")
    try:

        async def native_id() -> int:
            return threading.get_native_id()

        tid = await loop.run(native_id)
        assert tid != threading.get_native_id()
        assert kernel_name(tid) == "lre-upstream-t"
    finally:
        with trio.fail_after(10):
            await loop.aclose()
