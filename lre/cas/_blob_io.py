"""Whole-blob and protobuf helpers on top of any ``BlobStore``."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

import trio
from google.protobuf.message import DecodeError, Message

from lre.cas._protocol import BlobStore
from lre.digest import Digest, digest_of
from lre.errors import InvalidArgument, LreError

M = TypeVar("M", bound=Message)


async def _single(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def read_bytes(store: BlobStore, digest: Digest) -> bytes:
    """The whole content of ``digest``. Raises ``NotFound`` when absent."""
    parts = [chunk async for chunk in store.read(digest)]
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def write_bytes(store: BlobStore, data: bytes) -> Digest:
    """Store ``data`` and return its digest (``ResourceExhausted`` when full)."""
    digest = digest_of(data)
    await store.write(digest, _single(data))
    return digest


async def write_message(store: BlobStore, message: Message) -> Digest:
    """Store a message's serialized form and return its digest."""
    return await write_bytes(store, message.SerializeToString(deterministic=True))


async def read_message(store: BlobStore, digest: Digest, message_type: type[M]) -> M:
    """Read ``digest`` and parse it as ``message_type``.

    Raises ``NotFound`` when the blob is absent and ``InvalidArgument``
    naming the digest and type when it does not parse.
    """
    data = await read_bytes(store, digest)
    message = message_type()
    try:
        message.ParseFromString(data)
    except DecodeError as error:
        reason = str(error).rpartition(": ")[2] if ": " in str(error) else ""
        raise InvalidArgument(
            f"blob {digest} does not parse as {message_type.DESCRIPTOR.full_name}"
            + (f" ({reason}; REAPI strings are UTF-8)" if "UTF-8" in reason else "")
        ) from None
    return message


async def missing_digests(store: BlobStore, digests: Iterable[Digest]) -> list[Digest]:
    """The digests (deduplicated, first-seen order) that ``store`` lacks."""
    unique: Sequence[Digest] = list(dict.fromkeys(digests))
    sizes = await store.has_many(unique)
    return [d for d, size in zip(unique, sizes, strict=True) if size is None]


#: Blobs handled at once by ``read_blobs`` and ``write_blobs`` (lets a
#: remote store work on several in parallel).
_FALLBACK_TASKS = 8


async def _for_each(count: int, fn: Callable[[int], Awaitable[None]]) -> None:
    """Run ``fn(i)`` for ``i in range(count)`` on up to ``_FALLBACK_TASKS`` tasks."""
    indexes = iter(range(count))

    async def worker() -> None:
        for i in indexes:
            await fn(i)

    if count <= 1:
        await worker()
        return
    async with trio.open_nursery() as nursery:
        for _ in range(min(_FALLBACK_TASKS, count)):
            nursery.start_soon(worker)


async def read_blobs(store: BlobStore, digests: Sequence[Digest]) -> list[bytes | LreError]:
    """The whole content of each digest, in order, or the ``LreError`` that blob met.

    An absent blob gets ``NotFound`` naming it. The blobs are read one by
    one on a few tasks. All contents are held at once: for batches of small
    blobs.
    """
    outcomes: list[bytes | LreError] = [b""] * len(digests)

    async def read_one(index: int) -> None:
        try:
            outcomes[index] = await read_bytes(store, digests[index])
        except LreError as exc:
            outcomes[index] = exc

    await _for_each(len(digests), read_one)
    return outcomes


async def write_blobs(
    store: BlobStore, blobs: Sequence[tuple[Digest, bytes]]
) -> list[LreError | None]:
    """Verify and store each ``(digest, data)``; ``None`` or the blob's ``LreError``, in order.

    The blobs are written one by one on a few tasks.
    """
    outcomes: list[LreError | None] = [None] * len(blobs)

    async def write_one(index: int) -> None:
        digest, data = blobs[index]
        try:
            await store.write(digest, single_chunk(data))
        except LreError as exc:
            outcomes[index] = exc

    await _for_each(len(blobs), write_one)
    return outcomes


class _OneChunk:
    """An async iterable of one chunk (cheaper than an async generator per blob)."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data

    def __aiter__(self) -> _OneChunk:
        return self

    async def __anext__(self) -> bytes:
        data = self._data
        if data is None:
            raise StopAsyncIteration
        self._data = None
        return data


def single_chunk(data: bytes) -> AsyncIterable[bytes]:
    """``data`` as a chunk stream of one chunk (for ``BlobStore.write``)."""
    return _OneChunk(data)


def blob_mismatch(digest: Digest, size: int, actual_hash: str) -> InvalidArgument | None:
    """The error of a whole blob of ``size`` bytes hashing to ``actual_hash``, if any.

    Same texts as ``BlobVerifier`` (size first, then hash).
    """
    if size != digest.size_bytes:
        return InvalidArgument(
            f"blob {digest}: received {size} bytes, expected {digest.size_bytes}"
        )
    if actual_hash != digest.hash:
        return InvalidArgument(
            f"blob {digest}: data hashes to {actual_hash}, expected {digest.hash}"
        )
    return None
