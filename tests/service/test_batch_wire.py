"""Hand-framed batch responses parse back, with protobuf, to what was meant."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lre.digest import MAX_BLOB_SIZE, Digest
from lre.proto import re_pb2, status_pb2
from lre.service._batch_wire import (
    digest_field,
    read_response,
    update_response,
)
from lre.service._digest_wire import DigestListScanner

digests = st.builds(
    Digest,
    st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
    st.integers(min_value=0, max_value=MAX_BLOB_SIZE),
)
statuses = st.builds(
    status_pb2.Status, code=st.integers(min_value=1, max_value=16), message=st.text(max_size=80)
)


@given(st.lists(st.tuples(digests, st.one_of(st.binary(max_size=300), statuses)), max_size=30))
def test_read_response_matches_protobuf(
    items: list[tuple[Digest, bytes | status_pb2.Status]],
) -> None:
    raw = read_response([digest_field(d) for d, _ in items], [o for _, o in items])
    expected = re_pb2.BatchReadBlobsResponse()
    for digest, outcome in items:
        if isinstance(outcome, bytes):
            expected.responses.add(digest=digest.to_proto(), data=outcome)
        else:
            expected.responses.add(digest=digest.to_proto(), status=outcome)
    assert re_pb2.BatchReadBlobsResponse.FromString(raw) == expected
    assert raw == expected.SerializeToString()


@given(st.lists(st.tuples(digests, st.one_of(st.none(), statuses)), max_size=30))
def test_update_response_matches_protobuf(
    items: list[tuple[Digest, status_pb2.Status | None]],
) -> None:
    raw = update_response([digest_field(d) for d, _ in items], [s for _, s in items])
    expected = re_pb2.BatchUpdateBlobsResponse()
    for digest, status in items:
        if status is None:
            expected.responses.add(digest=digest.to_proto())
        else:
            expected.responses.add(digest=digest.to_proto(), status=status)
    assert raw == expected.SerializeToString()


@given(st.lists(digests, min_size=1, max_size=30))
def test_scanned_digests_reframe_as_response_fields(listed: list[Digest]) -> None:
    request = re_pb2.BatchReadBlobsRequest(digests=[d.to_proto() for d in listed])
    raw = request.SerializeToString()
    found = DigestListScanner(2).scan(raw, 0, len(raw), len(listed))
    assert found is not None
    assert found.fields(1) == [digest_field(d) for d in listed]
