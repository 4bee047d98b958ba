"""``CacheAdmin``: ``lre cache gc`` / ``lre cache clean`` / ``lre stats --zero``
done by the running server (the status listener's POST routes call it).

The server keeps the CAS index in memory, so shrinking the cache while it
runs has to happen here: a store changed behind its back would go on
announcing deleted blobs. Blobs under the cache contract (told to a client
within ``keep_told``) and pinned blobs stay unless ``force``; pinned ones
(inputs of running actions) stay even then.

The admin token: POST routes change state, so they need
``Authorization: Bearer <token>``, where the token is a random string lre
writes at start to ``admin.token`` in its state directory (mode 0600). The
CLI reads it from there; a web page cannot send that header to 127.0.0.1
(no CORS answer), and a process that cannot read lre's state cannot either.
Failure: an unlink error of one store ends that request with the error in
its answer; the stores already shrunk stay shrunk.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from lre.cas import FilesystemActionCache, FilesystemStore
from lre.config import ADMIN_TOKEN_FILE

__all__ = ["CacheAdmin", "shrink_store", "write_admin_token"]


def write_admin_token(state_dir: str) -> str:
    """A fresh token, written to ``state_dir/admin.token`` (0600, replaced
    atomically); ``OSError`` propagates."""
    token = secrets.token_urlsafe(24)
    path = os.path.join(state_dir, ADMIN_TOKEN_FILE)
    temp = path + ".tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(token + "\n")
    os.replace(temp, path)
    return token


async def shrink_store(
    name: str, store: FilesystemStore, to_bytes: int, *, force: bool
) -> dict[str, object]:
    """Evict from the open ``store`` down to ``to_bytes`` and describe it in
    the row ``lre cache gc`` prints, the same whether the running server or
    the CLI (lre down) shrinks. Failure: the store's unlink error propagates."""
    before = store.statistics()
    report = await store.evict_to(to_bytes, force=force)
    return {
        "name": name,
        "before_bytes": before.stored_bytes,
        "after_bytes": store.statistics().stored_bytes,
        "evicted_blobs": report.evicted_blobs,
        "evicted_bytes": report.evicted_bytes,
        "kept_told_bytes": report.kept_told_bytes,
        "keep_told_s": before.keep_told_s,
    }


@dataclass(frozen=True, slots=True)
class CacheAdmin:
    """The state-changing cache operations of a running lre."""

    blob_stores: Mapping[str, FilesystemStore]
    action_caches: Mapping[str, FilesystemActionCache]
    zero_hits: Callable[[], Awaitable[None]] | None = None

    async def gc(self, to_bytes: int, *, force: bool) -> dict[str, object]:
        """Shrink each filesystem CAS to at most ``to_bytes``."""
        rows = [
            await shrink_store(name, store, to_bytes, force=force)
            for name, store in sorted(self.blob_stores.items())
        ]
        return {"stores": rows, "force": force}

    async def clean(self, *, force: bool) -> dict[str, object]:
        """Empty each filesystem CAS (but what the contract holds, unless
        ``force``) and every filesystem action cache."""
        answer = await self.gc(0, force=force)
        cleared = []
        for name, cache in sorted(self.action_caches.items()):
            usage = await cache.clear()
            cleared.append({"name": name, "entries": usage.count, "bytes": usage.stored_bytes})
        answer["action_caches"] = cleared
        return answer

    async def zero(self) -> dict[str, object]:
        """Reset the hit counters ``lre stats`` shows."""
        if self.zero_hits is not None:
            await self.zero_hits()
        return {"zeroed": self.zero_hits is not None}
