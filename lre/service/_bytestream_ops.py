"""ByteStream Read, Write and QueryWriteStatus on a ``BlobStore`` (Trio side)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable

from lre.cas import BlobStore, closing_stream
from lre.errors import InvalidArgument, LreError, OutOfRange
from lre.proto import bs_pb2
from lre.service._resource_names import BlobResource, parse_write_resource
from lre.service._uploads import PartialUpload, UploadKey, UploadRegistry
from lre.service._zstd import CHUNK_BYTES, acompress, adecompress

#: Slack allowed for compressed uploads over the raw size (zstd framing of
#: incompressible data grows by well under 1%).
_COMPRESSED_SLACK = 1 << 16


async def read_blob(
    store: BlobStore, resource: BlobResource, read_offset: int, read_limit: int
) -> AsyncIterator[bytes]:
    """Yield the data of ``ReadResponse`` messages, at most ``CHUNK_BYTES`` each.

    Raises ``OutOfRange`` for a negative offset or one past the end (offset ==
    size yields nothing), ``InvalidArgument`` for a negative limit or a
    non-zero limit on a compressed read, ``NotFound`` for an absent blob.
    Offsets of compressed reads count compressed bytes.
    """
    digest = resource.digest
    if read_offset < 0:
        raise OutOfRange(f"read_offset: {read_offset} is negative")
    if read_limit < 0:
        raise InvalidArgument(f"read_limit: {read_limit} is negative")
    if resource.compressed:
        if read_limit != 0:
            raise InvalidArgument(f"read_limit: {read_limit} must be 0 for compressed-blobs reads")
        skip = read_offset
        produced = 0
        async with (
            closing_stream(store.read(digest)) as raw,
            closing_stream(acompress(raw)) as pieces,
        ):
            async for piece in pieces:
                produced += len(piece)
                if skip >= len(piece):
                    skip -= len(piece)
                    continue
                yield piece[skip:]
                skip = 0
        if read_offset > produced:
            raise OutOfRange(
                f"read_offset: {read_offset} is past the end of the compressed blob "
                f"({produced} bytes)"
            )
        return
    if read_offset > digest.size_bytes:
        raise OutOfRange(
            f"read_offset: {read_offset} is past the end of blob {digest} "
            f"({digest.size_bytes} bytes)"
        )
    async with closing_stream(store.read(digest, read_offset, read_limit or None)) as chunks:
        async for chunk in chunks:
            if len(chunk) <= CHUNK_BYTES:
                yield chunk
            else:
                view = memoryview(chunk)
                for start in range(0, len(chunk), CHUNK_BYTES):
                    yield bytes(view[start : start + CHUNK_BYTES])


class _Unfinished(Exception):
    """The request stream ended without ``finish_write`` (internal)."""


async def _stream(
    first: bs_pb2.WriteRequest,
    requests: AsyncIterator[bs_pb2.WriteRequest],
    name: str,
    upload: PartialUpload,
    limit: int,
) -> AsyncIterator[bytes]:
    """The blob's bytes for the store, as the requests arrive.

    Yields what an earlier (broken) stream left in ``upload`` first, then
    the data of ``first`` and its successors, recording each in ``upload``
    so that a stream cut short can be resumed. Raises ``_Unfinished`` when
    the stream ends without ``finish_write`` and ``InvalidArgument`` for a
    bad request.
    """
    for chunk in list(upload.chunks):
        yield chunk
    request = first
    while True:
        data = _append_request(request, name, upload, limit)
        if data:
            yield data
        if request.finish_write:
            return
        try:
            request = await anext(requests)
        except StopAsyncIteration:
            raise _Unfinished from None


def _check_request(request: bs_pb2.WriteRequest, name: str, upload: PartialUpload) -> None:
    """Raise ``InvalidArgument`` unless ``request`` continues ``upload`` correctly."""
    if request.resource_name and request.resource_name != name:
        raise InvalidArgument(
            f"resource_name: {request.resource_name[:200]!r} differs from the "
            f"stream's first name {name[:200]!r}"
        )
    if request.write_offset != upload.committed:
        raise _offset_error(request.write_offset, upload.committed)


def _append_request(
    request: bs_pb2.WriteRequest, name: str, upload: PartialUpload, limit: int
) -> bytes:
    """Records the data of ``request`` in ``upload`` and returns it; raises
    ``InvalidArgument`` when the request does not continue ``upload``
    correctly or its data takes the upload past ``limit`` bytes."""
    _check_request(request, name, upload)
    data = request.data
    if data:
        if upload.committed + len(data) > limit:
            raise _excess_error(upload.committed + len(data), limit, name)
        upload.append(data)
    return data


def _offset_error(offset: int, committed: int) -> InvalidArgument:
    relation = "skips ahead of" if offset > committed else "overlaps"
    return InvalidArgument(
        f"write_offset: {offset} {relation} the {committed} bytes already committed; "
        f"continue at write_offset {committed}"
    )


def write_single_now(
    request: bs_pb2.WriteRequest, resolve_store: Callable[[str], BlobStore], uploads: UploadRegistry
) -> bs_pb2.WriteResponse | None:
    """(Trio thread, no task of its own) ``write_single`` done at once through
    the store's ``immediate_writes``, or ``None`` (nothing changed) when it
    cannot be: a compressed blob, a store without them, an upload id with
    partial data or another stream writing it, a store that would have to
    wait. Checks and errors are ``write_blob``'s, in
    its order (a stored blob is accepted before its data is looked at).
    """
    name = request.resource_name
    resource = parse_write_resource(name)
    store = resolve_store(resource.instance_name)
    writes = store.capabilities().immediate_writes
    if writes is None or resource.compressed:
        return None
    digest = resource.digest
    if writes.present_now(digest):
        return bs_pb2.WriteResponse(committed_size=digest.size_bytes)
    if uploads.holds(UploadKey.of(resource)):
        return None
    _check_request(request, name, PartialUpload())
    data = request.data
    if len(data) > digest.size_bytes:
        raise _excess_error(len(data), digest.size_bytes, name)
    if not writes.write_now(digest, bytes(data)):
        return None
    return bs_pb2.WriteResponse(committed_size=digest.size_bytes)


def _excess_error(total: int, limit: int, name: str) -> InvalidArgument:
    return InvalidArgument(
        f"data: {total} bytes written exceed the blob's {limit} bytes ({name[:200]!r})"
    )


async def write_single(
    request: bs_pb2.WriteRequest, resolve_store: Callable[[str], BlobStore], uploads: UploadRegistry
) -> bs_pb2.WriteResponse:
    """``write_blob`` for a stream whose first request is its whole upload
    (``finish_write`` set); what follows it is not read."""

    async def only() -> AsyncGenerator[bs_pb2.WriteRequest, None]:
        yield request

    requests = only()
    try:
        return await write_blob(requests, resolve_store, uploads)
    finally:
        await requests.aclose()


async def write_blob(
    requests: AsyncIterator[bs_pb2.WriteRequest],
    resolve_store: Callable[[str], BlobStore],
    uploads: UploadRegistry,
) -> bs_pb2.WriteResponse:
    """Consume one Write stream and store the blob when ``finish_write`` arrives.

    ``resolve_store`` maps an instance name to its CAS (raising for unknown
    ones). Returns at once with the full size (or -1 when compressed) if the
    blob is already stored. A first ``write_offset`` of 0 restarts a partial
    upload; any other offset must equal the committed size. Errors discard
    the partial upload; a broken stream (cancellation) keeps it.
    """
    try:
        first = await anext(requests)
    except StopAsyncIteration:
        raise InvalidArgument("Write: the request stream was empty") from None
    name = first.resource_name
    resource = parse_write_resource(name)
    store = resolve_store(resource.instance_name)
    digest = resource.digest
    done_size = -1 if resource.compressed else digest.size_bytes
    if (await store.has_many([digest]))[0] is not None:
        return bs_pb2.WriteResponse(committed_size=done_size)
    key = UploadKey.of(resource)
    upload = uploads.acquire(key)
    try:
        if first.write_offset == 0 and upload.committed:
            upload.reset()
        if not resource.compressed:
            # Stream into the store while the rest arrives (hashing overlaps
            # receiving); the data is kept in ``upload`` until it succeeds.
            try:
                await store.write(digest, _stream(first, requests, name, upload, digest.size_bytes))
            except _Unfinished:
                uploads.release(key, upload)
                raise _unfinished_error(upload.committed) from None
            uploads.discard(key)
            # The store holds the blob (it may stop reading early when it
            # already had it), so the whole size is committed.
            return bs_pb2.WriteResponse(committed_size=digest.size_bytes)
        limit = digest.size_bytes + digest.size_bytes // 64 + _COMPRESSED_SLACK
        if not await _receive(first, requests, name, upload, limit):
            # A stream that stops without finish_write keeps its data (resumable).
            uploads.release(key, upload)
            raise _unfinished_error(upload.committed)
        chunks = list(upload.chunks)
        committed = upload.committed
        uploads.discard(key)
        await store.write(digest, adecompress(chunks, digest))
        return bs_pb2.WriteResponse(committed_size=committed)
    except LreError:
        if upload.busy:  # not the resumable case above
            uploads.discard(key)
        raise
    finally:
        uploads.release(key, upload)


def _unfinished_error(committed: int) -> InvalidArgument:
    return InvalidArgument(
        f"Write: the stream ended at offset {committed} without "
        f"finish_write; resume with write_offset {committed}"
    )


async def _receive(
    request: bs_pb2.WriteRequest,
    requests: AsyncIterator[bs_pb2.WriteRequest],
    name: str,
    upload: PartialUpload,
    limit: int,
) -> bool:
    """Append the data of ``request`` and its successors; False if ``finish_write`` never came."""
    while True:
        _append_request(request, name, upload, limit)
        if request.finish_write:
            return True
        try:
            request = await anext(requests)
        except StopAsyncIteration:
            return False


async def query_write_status(
    request: bs_pb2.QueryWriteStatusRequest,
    resolve_store: Callable[[str], BlobStore],
    uploads: UploadRegistry,
) -> bs_pb2.QueryWriteStatusResponse:
    """Complete with the full size (-1 compressed) if stored, else the partial size."""
    resource = parse_write_resource(request.resource_name)
    store = resolve_store(resource.instance_name)
    if (await store.has_many([resource.digest]))[0] is not None:
        size = -1 if resource.compressed else resource.digest.size_bytes
        return bs_pb2.QueryWriteStatusResponse(committed_size=size, complete=True)
    committed = uploads.committed(UploadKey.of(resource))
    return bs_pb2.QueryWriteStatusResponse(committed_size=committed, complete=False)
