"""ContentAddressableStorage requests (Trio side): FindMissing and the batches."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from lre.cas import BlobStore, ImmediateReads, read_blobs, sizes_of, write_blobs
from lre.digest import MAX_BLOB_SIZE, Digest
from lre.errors import InvalidArgument, LreError
from lre.proto import re_pb2, status_pb2
from lre.service._batch_wire import digest_field, read_response, update_response
from lre.service._digest_functions import check_digest_function
from lre.service._digest_wire import DigestList, DigestListScanner, span_between
from lre.service._status import rpc_status_of
from lre.service._varint import encode_varint
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


#: The digest lists of FindMissingBlobs and BatchReadBlobs requests (and
#: ``FindMissingBlobsResponse.missing_blob_digests``) are field 2.
_DIGESTS_FIELD_2 = DigestListScanner(2)
#: Requests with at least this many digests take the bulk path.
_BULK_MIN = 64


class _MissingQuery:
    """A FindMissingBlobs request, parsed: the digests to look up and how to
    build the response from their sizes.

    Large requests take a bulk path: the digests are read from the request's
    serialized bytes (``_digest_wire``) and the response is assembled from
    the missing elements' own bytes, so no protobuf object is made per
    digest. Anything unusual falls back to the per-digest path, which names
    a bad digest in ``InvalidArgument`` (raised by the constructor).
    """

    __slots__ = ("found", "hashes", "protos", "sizes")

    def __init__(self, request: re_pb2.FindMissingBlobsRequest) -> None:
        protos = request.blob_digests
        check_function_of_digests(request.digest_function, protos)

        def raw_of() -> tuple[bytes, bytes, bytes]:
            head = re_pb2.FindMissingBlobsRequest(instance_name=request.instance_name)
            tail = re_pb2.FindMissingBlobsRequest(digest_function=request.digest_function)
            return request.SerializeToString(), head.SerializeToString(), tail.SerializeToString()

        self.protos = protos
        self.found = _scan_digests(raw_of, len(protos))
        if self.found is not None:
            self.hashes: Sequence[str] = self.found.hashes
            self.sizes: Sequence[int] = self.found.sizes
        else:
            digests = parse_digests(protos, "blob_digests")
            self.hashes = [d.hash for d in digests]
            self.sizes = [d.size_bytes for d in digests]

    def response(self, sizes: Sequence[int | None]) -> re_pb2.FindMissingBlobsResponse:
        """The digests whose size is ``None``, each once, in request order."""
        missing = [i for i, size in enumerate(sizes) if size is None]
        if len(missing) > 1:
            hashes, lengths = self.hashes, self.sizes
            if len(set(hashes)) != len(hashes):  # a repeated digest is listed once
                first = {(hashes[i], lengths[i]): i for i in reversed(missing)}
                missing = sorted(first.values())
        if self.found is not None:
            return re_pb2.FindMissingBlobsResponse.FromString(self.found.elements(missing))
        response = re_pb2.FindMissingBlobsResponse()
        if missing:
            response.missing_blob_digests.extend(self.protos[i] for i in missing)
        return response


async def find_missing(
    store: BlobStore, request: re_pb2.FindMissingBlobsRequest
) -> re_pb2.FindMissingBlobsResponse:
    """(Trio) The requested digests the store lacks (each once, request order).
    ``InvalidArgument`` names a malformed digest."""
    query = _MissingQuery(request)
    return query.response(await sizes_of(store, query.hashes, query.sizes))


def find_missing_now(
    reads: ImmediateReads, request: re_pb2.FindMissingBlobsRequest
) -> re_pb2.FindMissingBlobsResponse | None:
    """``find_missing`` answered on the calling thread (the gRPC one), or
    ``None`` when ``reads`` cannot answer now. Raises as ``find_missing``."""
    query = _MissingQuery(request)
    sizes = reads.sizes_now(query.hashes, query.sizes)
    return None if sizes is None else query.response(sizes)


def _digest_fields(protos: Sequence[re_pb2.Digest], found: DigestList | None) -> list[bytes]:
    """Each requested digest as field 1 of a batch ``Response`` (for ``_batch_wire``)."""
    if found is not None:
        return found.fields(1)
    return [_proto_field(p) for p in protos]


def _proto_field(proto: re_pb2.Digest) -> bytes:
    """``proto`` as field 1 of a batch ``Response``, exactly as the client sent it."""
    encoded: bytes = proto.SerializeToString()
    return b"\x0a" + encode_varint(len(encoded)) + encoded


def _scan_digests(
    raw_of: Callable[[], tuple[bytes, bytes, bytes]], count: int
) -> DigestList | None:
    """Bulk-read a request's digest list (field 2), or ``None`` to parse it per digest."""
    if count < _BULK_MIN:
        return None
    raw, head, tail = raw_of()
    span = span_between(raw, head, tail)
    return _DIGESTS_FIELD_2.scan(raw, *span, count) if span is not None else None


async def batch_update(store: BlobStore, request: re_pb2.BatchUpdateBlobsRequest) -> bytes:
    """Verify and store each blob; a bad blob gets its own status, the rest succeed.

    Returns the serialized ``BatchUpdateBlobsResponse``. The blobs are
    handed to the store in one ``write_blobs`` call (one verification pass
    and, for a filesystem store, a few thread calls for the whole batch).
    A successful blob's status is left unset (code 0, OK).
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
    fields = [
        digest_field(digest) if digest is not None else _proto_field(proto)
        for digest, proto in zip(parsed, protos, strict=True)
    ]
    return update_response(fields, statuses)


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
) -> bytes:
    """Read each blob (IDENTITY: always acceptable); absent ones get NOT_FOUND.

    Returns the serialized ``BatchReadBlobsResponse``. Raises
    ``InvalidArgument`` naming the total when the requested sizes add up to
    more than ``max_total_bytes``.
    """
    protos = request.digests
    check_function_of_digests(request.digest_function, protos)

    def raw_of() -> tuple[bytes, bytes, bytes]:
        head = re_pb2.BatchReadBlobsRequest(instance_name=request.instance_name)
        tail = re_pb2.BatchReadBlobsRequest(
            acceptable_compressors=request.acceptable_compressors,
            digest_function=request.digest_function,
        )
        return request.SerializeToString(), head.SerializeToString(), tail.SerializeToString()

    found = _scan_digests(raw_of, len(protos))
    if found is not None:
        digests = list(map(Digest, found.hashes, found.sizes))
    else:
        digests = parse_digests(protos, "digests")
    total = sum(d.size_bytes for d in digests)
    if total > max_total_bytes:
        raise InvalidArgument(
            f"digests: the requested blobs total {total} bytes, more than "
            f"max_batch_total_size_bytes ({max_total_bytes}); use ByteStream Read"
        )
    contents = await read_blobs(store, digests)
    outcomes: list[bytes | status_pb2.Status] = [
        data if isinstance(data, bytes) else rpc_status_of(data) for data in contents
    ]
    return read_response(_digest_fields(protos, found), outcomes)
