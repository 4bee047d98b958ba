"""Protobuf base-128 varints, for the messages lre frames or parses by hand."""

from __future__ import annotations

_ENCODED: dict[int, bytes] = {}
_ENCODED_MAX = 1 << 16


def encode_varint(value: int) -> bytes:
    """The protobuf varint of ``value`` (>= 0); small values come from a cache."""
    cached = _ENCODED.get(value)
    if cached is not None:
        return cached
    out = bytearray()
    rest = value
    while rest > 0x7F:
        out.append(rest & 0x7F | 0x80)
        rest >>= 7
    out.append(rest)
    encoded = bytes(out)
    if len(_ENCODED) >= _ENCODED_MAX:
        _ENCODED.clear()
    _ENCODED[value] = encoded
    return encoded


def decode_varint(raw: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the varint at ``raw[pos]``.

    ``IndexError`` when ``raw`` ends inside it, ``ValueError`` when it is
    longer than the 10 bytes a 64-bit value needs."""
    result = 0
    shift = 0
    while True:
        byte = raw[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
