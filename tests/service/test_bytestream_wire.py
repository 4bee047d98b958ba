"""The hand-written WriteRequest / ReadResponse codec agrees with protobuf."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lre.proto import bs_pb2
from lre.service._bytestream_wire import parse_write_request, serialize_read_response


@given(
    name=st.text(max_size=300),
    offset=st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    finish=st.booleans(),
    data=st.binary(max_size=3000),
)
def test_write_request_matches_protobuf(name: str, offset: int, finish: bool, data: bytes) -> None:
    raw = bs_pb2.WriteRequest(
        resource_name=name, write_offset=offset, finish_write=finish, data=data
    ).SerializeToString()
    chunk = parse_write_request(raw)
    assert chunk.malformed == ""
    assert (chunk.resource_name, chunk.write_offset, chunk.finish_write) == (name, offset, finish)
    assert bytes(chunk.data) == data


@given(raw=st.binary(max_size=200))
def test_garbage_never_raises_and_agrees_on_validity(raw: bytes) -> None:
    chunk = parse_write_request(raw)
    if not chunk.malformed:
        try:
            reference = bs_pb2.WriteRequest.FromString(raw)
        except Exception:
            return  # protobuf is stricter in places (e.g. group wire types)
        assert bytes(chunk.data) == reference.data
        assert chunk.write_offset == reference.write_offset


@given(data=st.binary(max_size=5000))
def test_read_response_matches_protobuf(data: bytes) -> None:
    assert bs_pb2.ReadResponse.FromString(serialize_read_response(data)).data == data
