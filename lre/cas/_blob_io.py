"""Whole-blob and protobuf helpers on top of any ``BlobStore``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from lre.cas._protocol import BlobStore
from lre.digest import Digest, digest_of
from lre.errors import InvalidArgument

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
    except DecodeError:
        raise InvalidArgument(
            f"blob {digest} does not parse as {message_type.DESCRIPTOR.full_name}"
        ) from None
    return message


async def missing_digests(store: BlobStore, digests: Iterable[Digest]) -> list[Digest]:
    """The digests (deduplicated, first-seen order) that ``store`` lacks."""
    unique: Sequence[Digest] = list(dict.fromkeys(digests))
    sizes = await store.has_many(unique)
    return [d for d, size in zip(unique, sizes, strict=True) if size is None]
