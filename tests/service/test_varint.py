"""Varints framed and parsed by hand agree with protobuf's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lre.proto import re_pb2
from lre.service._varint import decode_varint, encode_varint


@given(st.integers(min_value=1, max_value=(1 << 64) - 1))
def test_encoding_is_protobufs(value: int) -> None:
    framed = re_pb2.Digest(size_bytes=value if value < 1 << 63 else value - (1 << 64))
    assert framed.SerializeToString() == b"\x10" + encode_varint(value)


@given(st.integers(min_value=0, max_value=(1 << 64) - 1), st.binary(max_size=8))
def test_decoding_reads_back_what_was_encoded(value: int, tail: bytes) -> None:
    raw = b"\x00" + encode_varint(value) + tail
    assert decode_varint(raw, 1) == (value, len(raw) - len(tail))


def test_truncated_and_overlong_varints_are_refused() -> None:
    with pytest.raises(IndexError):
        decode_varint(b"\x80\x80", 0)
    with pytest.raises(ValueError, match="10 bytes"):
        decode_varint(b"\xff" * 11 + b"\x01", 0)
