"""ContentAddressableStorage requests (Trio side): FindMissing and the batches."""

from __future__ import annotations

import re
from collections.abc import Sequence

from lre.cas import BlobStore, ImmediateReads, read_blobs, write_blobs
from lre.digest import MAX_BLOB_SIZE, Digest
from lre.errors import InvalidArgument, LreError
from lre.proto import re_pb2, status_pb2
from lre.service._digest_functions import check_digest_function
from lre.service._status import rpc_status_of
from lre.service._zstd import decompress_bytes

_IDENTITY = re_pb2.Compressor.IDENTITY
_ZSTD = re_pb2.Compressor.ZSTD


def check_function_of_digests(value: int, digests: Sequence[re_pb2.Digest]) -> None:
    """``check_digest_function`` for a request listing ``digests`` (the first
    hash is the sample when ``value`` is 0)."""
    check_digest_function(value, digests[0].hash if digests else None)


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


async def find_missing(
    store: BlobStore, request: re_pb2.FindMissingBlobsRequest
) -> re_pb2.FindMissingBlobsResponse:
    """(Trio) The requested digests the store lacks (each once, request order).
    ``InvalidArgument`` names a malformed digest."""
    protos = request.blob_digests
    check_function_of_digests(request.digest_function, protos)
    digests = parse_digests(protos, "blob_digests")
    return _missing(digests, protos, await store.has_many(digests))


def find_missing_now(
    reads: ImmediateReads, request: re_pb2.FindMissingBlobsRequest
) -> re_pb2.FindMissingBlobsResponse | None:
    """``find_missing`` answered on the calling thread (the gRPC one), or
    ``None`` when ``reads`` cannot answer now. Raises as ``find_missing``."""
    protos = request.blob_digests
    check_function_of_digests(request.digest_function, protos)
    digests = parse_digests(protos, "blob_digests")
    sizes = reads.sizes_now([d.hash for d in digests], [d.size_bytes for d in digests])
    return None if sizes is None else _missing(digests, protos, sizes)


def _missing(
    digests: Sequence[Digest], protos: Sequence[re_pb2.Digest], sizes: Sequence[int | None]
) -> re_pb2.FindMissingBlobsResponse:
    response = re_pb2.FindMissingBlobsResponse()
    listed: set[Digest] = set()
    for digest, proto, size in zip(digests, protos, sizes, strict=True):
        if size is None and digest not in listed:
            listed.add(digest)
            response.missing_blob_digests.append(proto)
    return response


async def batch_update(
    store: BlobStore, request: re_pb2.BatchUpdateBlobsRequest
) -> re_pb2.BatchUpdateBlobsResponse:
    """Verify and store each blob; a bad blob gets its own status, the rest succeed.

    The blobs are handed to the store in one ``write_blobs`` call. A
    successful blob's status is left unset (code 0, OK).
    """
    items = request.requests
    protos = [item.digest for item in items]
    check_function_of_digests(request.digest_function, protos)
    statuses: list[status_pb2.Status | None] = [None] * len(items)
    parsed: list[Digest | None] = list(_parse_update_digests(protos, statuses))
    blobs: list[tuple[Digest, bytes]] = []
    positions: list[int] = []
    for index, item in enumerate(items):
        digest = parsed[index]
        if digest is None:
            continue
        try:
            data = item.data
            compressor = item.compressor
            if compressor == _ZSTD:
                data = decompress_bytes(data, digest)
            elif compressor != _IDENTITY:
                raise InvalidArgument(
                    f"requests[{index}].compressor: {compressor} is not supported "
                    "(supported: IDENTITY, ZSTD)"
                )
        except LreError as exc:
            statuses[index] = rpc_status_of(exc)
            continue
        blobs.append((digest, data))
        positions.append(index)
    outcomes = await write_blobs(store, blobs)
    for index, error in zip(positions, outcomes, strict=True):
        if error is not None:
            statuses[index] = rpc_status_of(error)
    response = re_pb2.BatchUpdateBlobsResponse()
    for proto, status in zip(protos, statuses, strict=True):
        entry = response.responses.add()
        entry.digest.CopyFrom(proto)
        if status is not None:
            entry.status.CopyFrom(status)
    return response


def _parse_update_digests(
    protos: Sequence[re_pb2.Digest], statuses: list[status_pb2.Status | None]
) -> list[Digest | None]:
    """The valid digests (``None`` for a bad one, whose status is set)."""
    try:
        return list(parse_digests(protos, "requests[].digest"))
    except LreError:
        pass
    parsed: list[Digest | None] = []
    for index, proto in enumerate(protos):
        try:
            parsed.append(Digest.from_proto(proto, field=f"requests[{index}].digest"))
        except LreError as exc:
            parsed.append(None)
            statuses[index] = rpc_status_of(exc)
    return parsed


async def batch_read(
    store: BlobStore, request: re_pb2.BatchReadBlobsRequest, max_total_bytes: int
) -> re_pb2.BatchReadBlobsResponse:
    """Read each blob (IDENTITY: always acceptable); absent ones get NOT_FOUND.

    Raises ``InvalidArgument`` naming the total when the requested sizes add
    up to more than ``max_total_bytes``.
    """
    protos = request.digests
    check_function_of_digests(request.digest_function, protos)
    digests = parse_digests(protos, "digests")
    total = sum(d.size_bytes for d in digests)
    if total > max_total_bytes:
        raise InvalidArgument(
            f"digests: the requested blobs total {total} bytes, more than "
            f"max_batch_total_size_bytes ({max_total_bytes}); use ByteStream Read"
        )
    contents = await read_blobs(store, digests)
    response = re_pb2.BatchReadBlobsResponse()
    for proto, data in zip(protos, contents, strict=True):
        entry = response.responses.add()
        entry.digest.CopyFrom(proto)
        if isinstance(data, bytes):
            entry.data = data
        else:
            entry.status.CopyFrom(rpc_status_of(data))
    return response
