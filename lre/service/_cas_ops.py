"""ContentAddressableStorage requests (Trio side): FindMissing and the batches."""

from __future__ import annotations

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


_HEX_DIGITS = b"0123456789abcdef"


def _all_valid(hashes: Sequence[str], sizes: Sequence[int]) -> bool:
    """Whether every hash is 64 lowercase hex characters and every size lies
    in 0..``MAX_BLOB_SIZE``, in a few passes that run in C (no per-digest
    Python code): the joined length with the shortest hash fixes every
    length, and deleting the hex digits from the joined bytes leaves none."""
    if not hashes:
        return True
    joined = "".join(hashes)
    return (
        len(joined) == 64 * len(hashes)
        and min(map(len, hashes)) == 64
        and joined.isascii()
        and not joined.encode("ascii").translate(None, _HEX_DIGITS)
        and min(sizes) >= 0
        and max(sizes) <= MAX_BLOB_SIZE
    )


def checked_digests(digests: Sequence[re_pb2.Digest], field: str) -> tuple[list[str], list[int]]:
    """The hashes and sizes of ``digests``, all valid; ``InvalidArgument``
    names the first bad one as ``field[index]`` (then each digest is parsed
    on its own to find it)."""
    hashes = [d.hash for d in digests]
    sizes = [d.size_bytes for d in digests]
    if not _all_valid(hashes, sizes):
        parse = Digest.parse
        for i, (h, s) in enumerate(zip(hashes, sizes, strict=True)):
            parse(h, s, field=f"{field}[{i}]")
    return hashes, sizes


def parse_digests(digests: Sequence[re_pb2.Digest], field: str) -> list[Digest]:
    """``checked_digests`` as ``Digest`` values."""
    return list(map(Digest, *checked_digests(digests, field)))


async def find_missing(
    store: BlobStore, request: re_pb2.FindMissingBlobsRequest
) -> re_pb2.FindMissingBlobsResponse:
    """(Trio) The requested digests the store lacks (each once, request order).
    ``InvalidArgument`` names a malformed digest."""
    protos = request.blob_digests
    check_function_of_digests(request.digest_function, protos)
    hashes, sizes = checked_digests(protos, "blob_digests")
    found = await store.has_many(list(map(Digest, hashes, sizes)))
    return _missing(protos, hashes, sizes, found)


def find_missing_now(
    reads: ImmediateReads, request: re_pb2.FindMissingBlobsRequest
) -> re_pb2.FindMissingBlobsResponse | None:
    """``find_missing`` answered on the calling thread (the gRPC one), or
    ``None`` when ``reads`` cannot answer now. Raises as ``find_missing``."""
    protos = request.blob_digests
    check_function_of_digests(request.digest_function, protos)
    hashes, sizes = checked_digests(protos, "blob_digests")
    found = reads.sizes_now(hashes, sizes)
    return None if found is None else _missing(protos, hashes, sizes, found)


def _missing(
    protos: Sequence[re_pb2.Digest],
    hashes: Sequence[str],
    sizes: Sequence[int],
    found: Sequence[int | None],
) -> re_pb2.FindMissingBlobsResponse:
    """The response listing ``protos[i]`` where ``found[i]`` is None, each
    digest once (its first place)."""
    first: dict[tuple[str, int], int] = {}
    for index, size in enumerate(found):
        if size is None:
            first.setdefault((hashes[index], sizes[index]), index)
    response = re_pb2.FindMissingBlobsResponse()
    response.missing_blob_digests.extend([protos[i] for i in first.values()])
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
