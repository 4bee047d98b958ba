"""ContentAddressableStorage requests (Trio side): FindMissing and the batches."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from lre.cas import BlobStore, read_bytes
from lre.digest import Digest
from lre.errors import InvalidArgument, LreError
from lre.proto import re_pb2, status_pb2
from lre.service._digest_functions import check_digest_function as check_function
from lre.service._status import rpc_status_of
from lre.service._zstd import decompress_bytes

_OK = status_pb2.Status()
_IDENTITY = re_pb2.Compressor.IDENTITY
_ZSTD = re_pb2.Compressor.ZSTD


def check_digest_function(value: int, digests: Sequence[re_pb2.Digest]) -> None:
    """Reject an unsupported ``digest_function`` (inferred from the first hash when 0)."""
    check_function(value, digests[0].hash if digests else None)


def parse_digests(digests: Sequence[re_pb2.Digest], field: str) -> list[Digest]:
    """Validate every digest; ``InvalidArgument`` names ``field[index]``."""
    parse = Digest.parse
    try:
        return [parse(d.hash, d.size_bytes, field=field) for d in digests]
    except InvalidArgument:
        for i, d in enumerate(digests):  # slow path only to name the index
            parse(d.hash, d.size_bytes, field=f"{field}[{i}]")
        raise


async def find_missing(
    store: BlobStore, request: re_pb2.FindMissingBlobsRequest
) -> re_pb2.FindMissingBlobsResponse:
    """The requested digests the store lacks (each once, request order)."""
    protos = request.blob_digests
    check_digest_function(request.digest_function, protos)
    digests = parse_digests(protos, "blob_digests")
    sizes = await store.has_many(digests)
    response = re_pb2.FindMissingBlobsResponse()
    seen: set[Digest] = set()
    missing = []
    for index, size in enumerate(sizes):
        if size is None:
            digest = digests[index]
            if digest not in seen:
                seen.add(digest)
                missing.append(protos[index])
    response.missing_blob_digests.extend(missing)
    return response


async def _single(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def batch_update(
    store: BlobStore, request: re_pb2.BatchUpdateBlobsRequest
) -> re_pb2.BatchUpdateBlobsResponse:
    """Verify and store each blob; a bad blob gets its own status, the rest succeed."""
    check_digest_function(request.digest_function, [r.digest for r in request.requests])
    response = re_pb2.BatchUpdateBlobsResponse()
    add = response.responses.add
    for index, item in enumerate(request.requests):
        try:
            digest = Digest.from_proto(item.digest, field=f"requests[{index}].digest")
            data = item.data
            if item.compressor == _ZSTD:
                data = decompress_bytes(data, digest)
            elif item.compressor != _IDENTITY:
                raise InvalidArgument(
                    f"requests[{index}].compressor: {item.compressor} is not supported "
                    "(supported: IDENTITY, ZSTD)"
                )
            await store.write(digest, _single(data))
            status = _OK
        except LreError as exc:
            status = rpc_status_of(exc)
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
    response = re_pb2.BatchReadBlobsResponse()
    add = response.responses.add
    for proto, digest in zip(protos, digests, strict=True):
        try:
            data = await read_bytes(store, digest)
        except LreError as exc:
            add(digest=proto, status=rpc_status_of(exc))
        else:
            add(digest=proto, data=data, compressor=_IDENTITY, status=_OK)
    return response
