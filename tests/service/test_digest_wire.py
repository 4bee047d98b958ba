"""The bulk digest-list reader agrees with protobuf, and declines what it cannot read."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from lre.digest import MAX_BLOB_SIZE
from lre.proto import re_pb2
from lre.service._digest_wire import DigestList, DigestListScanner, span_between

SCANNER = DigestListScanner(2)

hex_hashes = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
any_hashes = st.one_of(hex_hashes, st.text(max_size=70))
sizes = st.one_of(
    st.integers(min_value=0, max_value=300),
    st.integers(min_value=0, max_value=MAX_BLOB_SIZE),
    st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
)


def scan(request: re_pb2.FindMissingBlobsRequest) -> DigestList | None:
    raw = request.SerializeToString()
    head = re_pb2.FindMissingBlobsRequest(instance_name=request.instance_name)
    tail = re_pb2.FindMissingBlobsRequest(digest_function=request.digest_function)
    span = span_between(raw, head.SerializeToString(), tail.SerializeToString())
    if span is None:
        return None
    return SCANNER.scan(raw, *span, len(request.blob_digests))


def request_of(
    digests: list[tuple[str, int]], instance: str = "", function: int = 0
) -> re_pb2.FindMissingBlobsRequest:
    return re_pb2.FindMissingBlobsRequest(
        instance_name=instance,
        blob_digests=[re_pb2.Digest(hash=h, size_bytes=s) for h, s in digests],
        digest_function=function,  # type: ignore[arg-type]
    )


@given(
    digests=st.lists(st.tuples(any_hashes, sizes), max_size=40),
    instance=st.text(max_size=300),
    function=st.integers(min_value=0, max_value=9),
)
def test_whatever_it_reads_matches_protobuf(
    digests: list[tuple[str, int]], instance: str, function: int
) -> None:
    request = request_of(digests, instance, function)
    found = scan(request)
    valid = all(
        len(h) == 64 and set(h) <= set("0123456789abcdef") and 0 <= s <= MAX_BLOB_SIZE
        for h, s in digests
    )
    if found is None:
        assert not valid or not digests
        return
    assert valid
    assert list(zip(found.hashes, found.sizes, strict=True)) == digests
    everything = re_pb2.FindMissingBlobsResponse.FromString(
        found.elements(list(range(len(digests))))
    )
    assert [(d.hash, d.size_bytes) for d in everything.missing_blob_digests] == digests
    some = list(range(0, len(digests), 2))
    subset = re_pb2.FindMissingBlobsResponse.FromString(found.elements(some))
    assert [(d.hash, d.size_bytes) for d in subset.missing_blob_digests] == [
        digests[i] for i in some
    ]


@given(
    digests=st.lists(st.tuples(hex_hashes, sizes.filter(lambda s: s >= 0)), min_size=1),
    instance=st.text(max_size=300),
)
def test_valid_canonical_lists_take_the_fast_path(
    digests: list[tuple[str, int]], instance: str
) -> None:
    digests = [(h, min(s, MAX_BLOB_SIZE)) for h, s in digests]
    found = scan(request_of(digests, instance, 1))
    assert found is not None
    assert list(zip(found.hashes, found.sizes, strict=True)) == digests


def test_declines_unknown_fields_and_non_minimal_encodings() -> None:
    digest = (hashlib.sha256(b"x").hexdigest(), 1)
    raw = request_of([digest, digest]).SerializeToString()
    # An unknown varint field 9 after the digests.
    with_unknown = raw + bytes([9 << 3, 1])
    assert SCANNER.scan(with_unknown, 0, len(with_unknown), 2) is None
    # The size 1 written with a redundant continuation byte (0x81 0x00).
    element = raw[: len(raw) // 2]
    padded = element[:1] + bytes([element[1] + 1]) + element[2:-1] + b"\x81\x00"
    assert re_pb2.FindMissingBlobsRequest.FromString(padded).blob_digests[0].size_bytes == 1
    assert SCANNER.scan(padded, 0, len(padded), 1) is None
    # A length byte that disagrees with what follows.
    wrong = element[:1] + bytes([element[1] + 1]) + element[2:]
    assert SCANNER.scan(wrong, 0, len(wrong), 1) is None
    # An uppercase hash.
    upper = request_of([(digest[0].upper(), 1)]).SerializeToString()
    assert SCANNER.scan(upper, 0, len(upper), 1) is None
