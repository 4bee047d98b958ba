"""ContentAddressableStorage requests (Trio side): FindMissing and the batches."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence

import trio

from lre.cas import BlobStore, read_bytes
from lre.digest import MAX_BLOB_SIZE, Digest
from lre.errors import InvalidArgument, LreError
from lre.proto import re_pb2, status_pb2
from lre.service._digest_functions import check_digest_function as check_function
from lre.service._digest_wire import DigestListScanner, field_span
from lre.service._status import rpc_status_of
from lre.service._zstd import decompress_bytes

_IDENTITY = re_pb2.Compressor.IDENTITY
_ZSTD = re_pb2.Compressor.ZSTD


def check_digest_function(value: int, digests: Sequence[re_pb2.Digest]) -> None:
    """Reject an unsupported ``digest_function`` (inferred from the first hash when 0)."""
    check_function(value, digests[0].hash if digests else None)


_HASHES = re.compile(r"(?:[0-9a-f]{64}\n)*")


def parse_digests(digests: Sequence[re_pb2.Digest], field: str) -> list[Digest]:
    """Validate every digest; ``InvalidArgument`` names ``field[index]``.

    Fast path for large requests: all hashes are checked by one regular
    expression over their concatenation and sizes by ``min``/``max``; only
    when that fails is each digest parsed to name the bad one.
    """
    hashes = [d.hash for d in digests]
    sizes = [d.size_bytes for d in digests]
    joined = "\n".join(hashes) + "\n"
    if (
        hashes
        # The length check keeps a hash holding "\n" from passing as two.
        and len(joined) == 65 * len(hashes)
        and _HASHES.fullmatch(joined) is not None
        and min(sizes) >= 0
        and max(sizes) <= MAX_BLOB_SIZE
    ):
        return list(map(Digest, hashes, sizes))
    parse = Digest.parse
    return [
        parse(h, s, field=f"{field}[{i}]")
        for i, (h, s) in enumerate(zip(hashes, sizes, strict=True))
    ]


#: ``FindMissingBlobsRequest.blob_digests`` and
#: ``FindMissingBlobsResponse.missing_blob_digests`` are both field 2.
_FIND_MISSING_DIGESTS = DigestListScanner(2)
_FIND_MISSING_FUNCTION_TAG = 3 << 3  # digest_function, varint
#: Requests with at least this many digests take the bulk path.
_BULK_MIN = 64


async def find_missing(
    store: BlobStore, request: re_pb2.FindMissingBlobsRequest
) -> re_pb2.FindMissingBlobsResponse:
    """The requested digests the store lacks (each once, request order).

    Large requests take a bulk path: the digests are read from the request's
    serialized bytes (``_digest_wire``) and the response is assembled from
    the missing elements' own bytes, so no protobuf object is made per
    digest. Anything unusual falls back to the per-digest path, which names
    a bad digest in ``InvalidArgument``.
    """
    protos = request.blob_digests
    count = len(protos)
    if count >= _BULK_MIN:
        check_function(request.digest_function, protos[0].hash)
        raw = request.SerializeToString()
        span = field_span(
            raw, request.instance_name, _FIND_MISSING_FUNCTION_TAG, request.digest_function
        )
        found = _FIND_MISSING_DIGESTS.scan(raw, *span, count) if span else None
        if found is not None:
            sizes = await store.has_many(list(map(Digest, found.hashes, found.sizes)))
            missing = [i for i, size in enumerate(sizes) if size is None]
            if len(missing) > 1:
                hashes = found.hashes
                if len(set(hashes)) != len(hashes):  # a repeated digest is listed once
                    first = {(hashes[i], found.sizes[i]): i for i in reversed(missing)}
                    missing = sorted(first.values())
            return re_pb2.FindMissingBlobsResponse.FromString(found.elements(missing))
    check_digest_function(request.digest_function, protos)
    digests = parse_digests(protos, "blob_digests")
    sizes = await store.has_many(digests)
    response = re_pb2.FindMissingBlobsResponse()
    missing_indexes = [i for i, size in enumerate(sizes) if size is None]
    if missing_indexes:
        seen: set[tuple[str, int]] = set()
        unique = []
        for i in missing_indexes:
            d = digests[i]
            key = (d.hash, d.size_bytes)
            if key not in seen:
                seen.add(key)
                unique.append(protos[i])
        response.missing_blob_digests.extend(unique)
    return response


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


#: Blobs of one batch request handled at once: lets a filesystem store use
#: its I/O threads in parallel; a handful of tasks per request, not per blob.
BATCH_WORKERS = 8


async def _for_each(count: int, fn: Callable[[int], Awaitable[None]]) -> None:
    """Run ``fn(i)`` for ``i in range(count)`` on up to ``BATCH_WORKERS`` tasks."""
    indexes = iter(range(count))

    async def worker() -> None:
        for i in indexes:
            await fn(i)

    if count <= 1:
        await worker()
        return
    async with trio.open_nursery() as nursery:
        for _ in range(min(BATCH_WORKERS, count)):
            nursery.start_soon(worker)


async def batch_update(
    store: BlobStore, request: re_pb2.BatchUpdateBlobsRequest
) -> re_pb2.BatchUpdateBlobsResponse:
    """Verify and store each blob; a bad blob gets its own status, the rest succeed.

    Blobs already present (one ``has_many`` for the whole batch) are not
    written again. A successful blob's status is left unset (code 0, OK).
    """
    items = request.requests
    check_digest_function(request.digest_function, [r.digest for r in items])
    statuses: list[status_pb2.Status | None] = [None] * len(items)
    parsed: list[Digest | None] = []
    for index, item in enumerate(items):
        try:
            parsed.append(Digest.from_proto(item.digest, field=f"requests[{index}].digest"))
        except LreError as exc:
            parsed.append(None)
            statuses[index] = rpc_status_of(exc)
    valid = [d for d in parsed if d is not None]
    sizes = await store.has_many(valid)
    present = {d for d, size in zip(valid, sizes, strict=True) if size is not None}

    async def store_one(index: int) -> None:
        digest = parsed[index]
        if digest is None or digest in present:
            return
        item = items[index]
        try:
            data = item.data
            if item.compressor == _ZSTD:
                data = decompress_bytes(data, digest)
            elif item.compressor != _IDENTITY:
                raise InvalidArgument(
                    f"requests[{index}].compressor: {item.compressor} is not supported "
                    "(supported: IDENTITY, ZSTD)"
                )
            await store.write(digest, _OneChunk(data))
        except LreError as exc:
            statuses[index] = rpc_status_of(exc)

    await _for_each(len(items), store_one)
    response = re_pb2.BatchUpdateBlobsResponse()
    add = response.responses.add
    for item, status in zip(items, statuses, strict=True):
        if status is None:
            add(digest=item.digest)
        else:
            add(digest=item.digest, status=status)
    return response


async def batch_read(
    store: BlobStore, request: re_pb2.BatchReadBlobsRequest, max_total_bytes: int
) -> re_pb2.BatchReadBlobsResponse:
    """Read each blob (IDENTITY: always acceptable); absent ones get NOT_FOUND.

    Raises ``InvalidArgument`` naming the total when the requested sizes add
    up to more than ``max_total_bytes``.
    """
    protos = request.digests
    check_digest_function(request.digest_function, protos)
    digests = parse_digests(protos, "digests")
    total = sum(d.size_bytes for d in digests)
    if total > max_total_bytes:
        raise InvalidArgument(
            f"digests: the requested blobs total {total} bytes, more than "
            f"max_batch_total_size_bytes ({max_total_bytes}); use ByteStream Read"
        )
    outcomes: list[bytes | status_pb2.Status] = [b""] * len(digests)

    async def read_one(index: int) -> None:
        try:
            outcomes[index] = await read_bytes(store, digests[index])
        except LreError as exc:
            outcomes[index] = rpc_status_of(exc)

    await _for_each(len(digests), read_one)
    response = re_pb2.BatchReadBlobsResponse()
    add = response.responses.add
    for proto, outcome in zip(protos, outcomes, strict=True):
        if isinstance(outcome, bytes):
            add(digest=proto, data=outcome)
        else:
            add(digest=proto, status=outcome)
    return response
