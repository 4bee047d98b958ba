"""Small blocking file calls run on the event loop instead of a thread.

A page-cache read or a small file create costs microseconds; a hop to a worker
thread and back costs tens, plus GIL hand-offs with the gRPC thread (measured
with bench/bench_firehose.py). The stores in this package run calls moving at
most ``INLINE_BYTES`` with ``call_inline`` and larger ones in threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import trio

T = TypeVar("T")

#: Calls moving at most this many bytes may run on the event loop.
INLINE_BYTES = 64 << 10


async def call_inline(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` on the event loop, between a cancellation check and a
    checkpoint (so it is a Trio checkpoint like a thread call). What ``fn``
    raises propagates; a cancellation arriving during the call is seen at the
    caller's next checkpoint, as with ``trio.to_thread.run_sync``."""
    await trio.lowlevel.checkpoint_if_cancelled()
    result = fn(*args)
    await trio.lowlevel.cancel_shielded_checkpoint()
    return result
