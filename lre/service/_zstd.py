"""zstd for ``compressed-blobs/zstd`` and batch compressors.

Decompression never produces more than the declared (digest) size plus one
byte: a zstd bomb is rejected after at most ``size + 1`` bytes of output,
whatever its frame header claims.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import IO, cast

import trio
import zstandard

from lre.digest import Digest
from lre.errors import InvalidArgument

#: Largest piece yielded by the streaming helpers.
CHUNK_BYTES = 1 << 20
_LEVEL = 1


class _ChunkSource:
    """A minimal file-like reader over a list of byte strings (for zstandard)."""

    def __init__(self, chunks: Iterable[bytes | memoryview]) -> None:
        self._chunks = iter(chunks)
        self._pending = memoryview(b"")

    def read(self, size: int = -1) -> bytes:
        while not self._pending:
            nxt = next(self._chunks, None)
            if nxt is None:
                return b""
            self._pending = memoryview(nxt)
        if size < 0 or size >= len(self._pending):
            out, self._pending = self._pending, memoryview(b"")
        else:
            out, self._pending = self._pending[:size], self._pending[size:]
        return bytes(out)


def _decompressor_error(digest: Digest, exc: Exception) -> InvalidArgument:
    return InvalidArgument(f"blob {digest}: zstd data does not decompress ({exc})")


def decompress_chunks(chunks: Iterable[bytes | memoryview], digest: Digest) -> Iterable[bytes]:
    """Decompress ``chunks`` (one zstd stream) into pieces of <= ``CHUNK_BYTES``.

    Raises ``InvalidArgument`` naming the digest when the data is not valid
    zstd or decompresses to more than ``digest.size_bytes`` (checked while
    decompressing; at most one extra byte is produced). A shorter result is
    left to the store's size check.
    """
    reader = zstandard.ZstdDecompressor().stream_reader(
        cast(IO[bytes], _ChunkSource(chunks)), read_across_frames=True
    )
    produced = 0
    limit = digest.size_bytes
    while True:
        want = min(CHUNK_BYTES, limit - produced + 1)
        try:
            piece = reader.read(want)
        except zstandard.ZstdError as exc:
            raise _decompressor_error(digest, exc) from None
        if not piece:
            return
        produced += len(piece)
        if produced > limit:
            raise InvalidArgument(
                f"blob {digest}: zstd data decompresses to more than the declared {limit} bytes"
            )
        yield piece


def decompress_bytes(data: bytes, digest: Digest) -> bytes:
    """Whole-blob form of ``decompress_chunks`` (for batch requests)."""
    return b"".join(decompress_chunks((data,), digest))


async def adecompress(chunks: Iterable[bytes | memoryview], digest: Digest) -> AsyncIterator[bytes]:
    """``decompress_chunks`` as a Trio async iterator (checkpoint per piece)."""
    for piece in decompress_chunks(chunks, digest):
        yield piece
        await trio.lowlevel.checkpoint()


def compress_bytes(data: bytes) -> bytes:
    """One zstd frame holding ``data``."""
    return zstandard.ZstdCompressor(level=_LEVEL).compress(data)


async def acompress(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """Compress a stream of chunks into one zstd frame, in pieces of <= ``CHUNK_BYTES``."""
    compressor = zstandard.ZstdCompressor(level=_LEVEL).compressobj()
    async for chunk in chunks:
        out = compressor.compress(chunk)
        for start in range(0, len(out), CHUNK_BYTES):
            yield out[start : start + CHUNK_BYTES]
    out = compressor.flush()
    for start in range(0, len(out), CHUNK_BYTES):
        yield out[start : start + CHUNK_BYTES]
