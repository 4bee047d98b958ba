"""``GrpcStore``: a ``BlobStore`` over an upstream REAPI CAS.

- ``has_many``: FindMissingBlobs in chunks of ``find_missing_chunk``
  digests (the empty blob is present without asking).
- ``read``: blobs up to the upstream's batch limit (GetCapabilities'
  ``max_batch_total_size_bytes``, less a margin for framing) with
  BatchReadBlobs, larger ones with ByteStream Read (offset and limit sent).
- ``write``: small blobs with BatchUpdateBlobs (the chunks are collected
  first, so the call can be retried), larger ones streamed with
  ByteStream Write in ``write_chunk_bytes`` messages (not retried once
  data has been sent; an upstream that already has the blob may end the
  stream early, which counts as success).

Degradation (``degrade=True``, the default for stores built from config):
when the upstream cannot be reached (``UpstreamUnavailable``: down, bad
credentials, circuit open), ``has_many`` answers "absent" for everything,
``read`` raises ``NotFound`` (unless bytes were already delivered, then
``Unavailable``), and ``write`` logs at debug level and drops the blob. The
transition itself is logged once by the client's health. Other upstream
answers (NOT_FOUND, INVALID_ARGUMENT, ...) raise the matching
``lre.errors`` class either way. ``strict()`` returns a view of the same
upstream that raises ``UpstreamUnavailable`` instead (used to upload inputs
before forwarding an action, where a silent drop would be wrong).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from typing import Any

import grpc.aio

from lre.cas._protocol import StoreCapabilities
from lre.cas._statistics import StoreStatistics
from lre.cas._streams import closing_stream
from lre.digest import EMPTY_DIGEST, Digest
from lre.errors import InvalidArgument, NotFound, OutOfRange, Unavailable, error_for_code
from lre.proto import bs_grpc, bs_pb2, re_grpc, re_pb2
from lre.upstream import (
    Connection,
    Metadata,
    UpstreamClient,
    UpstreamStatistics,
    UpstreamUnavailable,
)

#: grpc.aio's end-of-stream marker (missing from the type stubs).
_EOF: object = grpc.aio.EOF  # type: ignore[attr-defined]

log = logging.getLogger("lre.cas.upstream")

#: Bytes kept free in a batch request for digests and framing.
_BATCH_MARGIN = 64 << 10


class GrpcStore:
    """See the module docstring."""

    def __init__(
        self,
        client: UpstreamClient,
        *,
        instance_name: str = "",
        degrade: bool = True,
        find_missing_chunk: int = 10_000,
        write_chunk_bytes: int = 1 << 20,
        stream_timeout_s: float = 3600.0,
    ) -> None:
        self.client = client
        self.instance_name = instance_name
        self.degrade = degrade
        self.find_missing_chunk = find_missing_chunk
        self.write_chunk_bytes = write_chunk_bytes
        self.stream_timeout_s = stream_timeout_s
        self.dropped_writes = 0
        self.degraded_reads = 0
        self._capabilities = StoreCapabilities(statistics=self.statistics)

    def strict(self) -> GrpcStore:
        """The same upstream, raising ``UpstreamUnavailable`` instead of degrading."""
        view = GrpcStore(
            self.client,
            instance_name=self.instance_name,
            degrade=False,
            find_missing_chunk=self.find_missing_chunk,
            write_chunk_bytes=self.write_chunk_bytes,
            stream_timeout_s=self.stream_timeout_s,
        )
        return view

    def upstream_statistics(self) -> UpstreamStatistics:
        """Health and counters of the upstream (for /status and the TUI)."""
        return self.client.statistics()

    def capabilities(self) -> StoreCapabilities:
        """Statistics only (zeros): the upstream evicts and pins on its own."""
        return self._capabilities

    def statistics(self) -> StoreStatistics:
        """Nothing is held locally; counts are zero (the upstream has its own)."""
        return StoreStatistics(0, 0, 0, 0, 0, 0)

    async def aclose(self) -> None:
        await self.client.aclose()

    def _resource(self, digest: Digest, *, upload: bool = False) -> str:
        tail = f"blobs/{digest.hash}/{digest.size_bytes}"
        if upload:
            tail = f"uploads/{uuid.uuid4()}/{tail}"
        return f"{self.instance_name}/{tail}" if self.instance_name else tail

    async def _batch_payload_limit(self) -> int:
        limit = await self.client.batch_limit(self.instance_name)
        return max(0, limit - _BATCH_MARGIN)

    # ------------------------------------------------------------ has_many

    async def has_many(self, digests: Sequence[Digest]) -> list[int | None]:
        sizes: list[int | None] = [None] * len(digests)
        wanted: dict[Digest, list[int]] = {}
        for i, digest in enumerate(digests):
            if digest == EMPTY_DIGEST:
                sizes[i] = 0
            else:
                wanted.setdefault(digest, []).append(i)
        unique = list(wanted)
        try:
            for start in range(0, len(unique), self.find_missing_chunk):
                chunk = unique[start : start + self.find_missing_chunk]
                missing = await self._find_missing(chunk)
                for digest in chunk:
                    if digest not in missing:
                        for i in wanted[digest]:
                            sizes[i] = digest.size_bytes
        except UpstreamUnavailable:
            if not self.degrade:
                raise
            return [0 if d == EMPTY_DIGEST else None for d in digests]
        return sizes

    async def _find_missing(self, chunk: Sequence[Digest]) -> set[Digest]:
        request = re_pb2.FindMissingBlobsRequest(
            instance_name=self.instance_name, blob_digests=[d.to_proto() for d in chunk]
        )

        answer: re_pb2.FindMissingBlobsResponse = await self.client.call(
            re_grpc.ContentAddressableStorageStub, "FindMissingBlobs", request
        )
        return {Digest(d.hash, d.size_bytes) for d in answer.missing_blob_digests}

    # ------------------------------------------------------------ read

    async def read(
        self, digest: Digest, offset: int = 0, limit: int | None = None
    ) -> AsyncIterator[bytes]:
        if offset < 0 or offset > digest.size_bytes:
            raise OutOfRange(
                f"read of {digest}: offset {offset} is outside the blob (size {digest.size_bytes})"
            )
        if limit is not None and limit < 0:
            raise OutOfRange(f"read of {digest}: limit {limit} is negative")
        end = digest.size_bytes if limit is None else min(digest.size_bytes, offset + limit)
        if digest.size_bytes == 0 or end <= offset:
            return
        delivered = False
        counters = self.client.health.counters
        try:
            if digest.size_bytes <= await self._batch_payload_limit():
                data = await self._batch_read(digest)
                delivered = True
                counters["read_blobs"] += 1
                counters["read_bytes"] += end - offset
                yield data[offset:end]
                return
            async with self.client.limiter:
                async for chunk in self._stream_read(digest, offset, end - offset):
                    delivered = True
                    counters["read_bytes"] += len(chunk)
                    yield chunk
                counters["read_blobs"] += 1
        except UpstreamUnavailable as error:
            if not self.degrade or delivered:
                raise Unavailable(error.message) from None
            self.degraded_reads += 1
            raise NotFound(
                f"blob {digest} is not in the local store and the upstream "
                f"{self.client.name} cannot be reached"
            ) from None

    async def _batch_read(self, digest: Digest) -> bytes:
        request = re_pb2.BatchReadBlobsRequest(
            instance_name=self.instance_name, digests=[digest.to_proto()]
        )

        answer: re_pb2.BatchReadBlobsResponse = await self.client.call(
            re_grpc.ContentAddressableStorageStub, "BatchReadBlobs", request
        )
        for response in answer.responses:
            if response.digest.hash != digest.hash:
                continue
            code = response.status.code
            if code == 0:
                if len(response.data) != digest.size_bytes:
                    raise Unavailable(
                        f"upstream {self.client.name}: BatchReadBlobs returned "
                        f"{len(response.data)} bytes for {digest}"
                    )
                return bytes(response.data)
            if code == grpc.StatusCode.NOT_FOUND.value[0]:
                raise NotFound(f"blob {digest} is not in the upstream {self.client.name}")
            raise error_for_code(
                code,
                f"upstream {self.client.name}: BatchReadBlobs of {digest}: "
                f"{response.status.message}",
            )
        raise NotFound(f"blob {digest} is not in the upstream {self.client.name}")

    async def _stream_read(self, digest: Digest, offset: int, length: int) -> AsyncIterator[bytes]:
        request = bs_pb2.ReadRequest(
            resource_name=self._resource(digest), read_offset=offset, read_limit=length
        )
        what = f"ByteStream.Read of {digest}"

        async def start(
            connection: Connection, metadata: Metadata, timeout: float
        ) -> tuple[Any, Any]:
            stub = connection.stub(bs_grpc.ByteStreamStub)
            call = stub.Read(request, metadata=metadata, timeout=timeout)
            first = await call.read()
            return call, first

        try:
            call, message = await self.client.attempt(what, start, timeout_s=self.stream_timeout_s)
        except NotFound:
            raise NotFound(f"blob {digest} is not in the upstream {self.client.name}") from None
        try:
            received = 0
            while message is not _EOF:
                data = bytes(message.data)
                received += len(data)
                if data:
                    yield data
                message = await self.client.step(what, call.read)
            if received != length:
                raise Unavailable(
                    f"upstream {self.client.name}: {what} ended after {received} of {length} bytes"
                )
        finally:
            if message is not _EOF:
                self.client.loop.post(call.cancel)

    # ------------------------------------------------------------ write

    async def write(self, digest: Digest, chunks: AsyncIterable[bytes]) -> None:
        try:
            async with closing_stream(chunks):
                if digest.size_bytes == 0:
                    return
                if digest.size_bytes <= await self._batch_payload_limit():
                    data = await self._collect(digest, chunks)
                    await self._batch_write(digest, data)
                else:
                    async with self.client.limiter:
                        await self._stream_write(digest, chunks)
        except UpstreamUnavailable as error:
            if not self.degrade:
                raise
            self.dropped_writes += 1
            log.debug("not stored upstream: %s", error.message)

    @staticmethod
    async def _collect(digest: Digest, chunks: AsyncIterable[bytes]) -> bytes:
        parts: list[bytes] = []
        size = 0
        async for chunk in chunks:
            size += len(chunk)
            if size > digest.size_bytes:
                raise InvalidArgument(
                    f"write of {digest}: more than {digest.size_bytes} bytes were sent"
                )
            parts.append(chunk)
        if size != digest.size_bytes:
            raise InvalidArgument(
                f"write of {digest}: {size} bytes were sent, the digest says {digest.size_bytes}"
            )
        return b"".join(parts)

    async def _batch_write(self, digest: Digest, data: bytes) -> None:
        request = re_pb2.BatchUpdateBlobsRequest(
            instance_name=self.instance_name,
            requests=[re_pb2.BatchUpdateBlobsRequest.Request(digest=digest.to_proto(), data=data)],
        )

        answer: re_pb2.BatchUpdateBlobsResponse = await self.client.call(
            re_grpc.ContentAddressableStorageStub, "BatchUpdateBlobs", request
        )
        for response in answer.responses:
            if response.status.code != 0:
                raise error_for_code(
                    response.status.code,
                    f"upstream {self.client.name}: BatchUpdateBlobs of {digest}: "
                    f"{response.status.message}",
                )

    async def _stream_write(self, digest: Digest, chunks: AsyncIterable[bytes]) -> None:
        what = f"ByteStream.Write of {digest}"
        resource = self._resource(digest, upload=True)

        async def start(connection: Connection, metadata: Metadata, timeout: float) -> Any:
            stub = connection.stub(bs_grpc.ByteStreamStub)
            return stub.Write(metadata=metadata, timeout=timeout)

        call = await self.client.attempt(what, start, timeout_s=self.stream_timeout_s)
        finished = False
        try:
            offset = 0
            pending = bytearray()
            early = False

            async def send(data: bytes, last: bool) -> bool:
                """False when the upstream ended the stream early."""
                request = bs_pb2.WriteRequest(
                    resource_name=resource if offset == 0 else "",
                    write_offset=offset,
                    finish_write=last,
                    data=data,
                )

                async def write_one() -> bool:
                    if call.done():
                        return False
                    try:
                        await call.write(request)
                    except Exception:  # grpc.aio raises on a finished call
                        if call.done():
                            return False
                        raise
                    return True

                return await self.client.step(what, write_one)

            async for chunk in chunks:
                pending += chunk
                while len(pending) >= self.write_chunk_bytes and not early:
                    piece = bytes(pending[: self.write_chunk_bytes])
                    del pending[: self.write_chunk_bytes]
                    if offset + len(piece) > digest.size_bytes:
                        raise InvalidArgument(
                            f"write of {digest}: more than {digest.size_bytes} bytes were sent"
                        )
                    last = offset + len(piece) == digest.size_bytes and not pending
                    if not await send(piece, last):
                        early = True
                    offset += len(piece)
                if early:
                    break
            if not early:
                if offset + len(pending) != digest.size_bytes:
                    raise InvalidArgument(
                        f"write of {digest}: {offset + len(pending)} bytes were sent, "
                        f"the digest says {digest.size_bytes}"
                    )
                if pending or offset < digest.size_bytes:
                    await send(bytes(pending), True)
                    offset += len(pending)

            async def finish() -> Any:
                with contextlib.suppress(Exception):
                    await call.done_writing()
                return await call

            response = await self.client.step(what, finish)
            finished = True
            committed = response.committed_size
            if committed not in (digest.size_bytes, -1):
                raise Unavailable(
                    f"upstream {self.client.name}: {what}: committed {committed} of "
                    f"{digest.size_bytes} bytes"
                )
        finally:
            if not finished:
                self.client.loop.post(call.cancel)
