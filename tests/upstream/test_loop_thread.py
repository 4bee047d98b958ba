"""UpstreamLoop's asyncio thread carries its name where the kernel shows it."""

from __future__ import annotations

import threading

import trio

from lre.upstream import UpstreamLoop
from tests.hop.test_thread_name import kernel_name


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
