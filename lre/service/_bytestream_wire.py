"""Hand-written wire format of ByteStream's bulk messages (fewer copies).

grpc hands a deserializer the serialized message as ``bytes``. Parsing a
``WriteRequest`` with protobuf copies its ``data`` into the message and again
on every ``.data`` access; ``parse_write_request`` instead returns ``data``
as a ``memoryview`` into the received bytes. ``serialize_read_response``
frames a chunk as a ``ReadResponse`` with a single copy.

Both follow the protobuf encoding of ``google.bytestream`` (fields: Write
1 resource_name, 2 write_offset, 3 finish_write, 10 data; Read 10 data).
Unknown fields are skipped, as protobuf does.
"""

from __future__ import annotations

from dataclasses import dataclass

from lre.service._varint import decode_varint, encode_varint


@dataclass(slots=True)
class WriteChunk:
    """A parsed ``WriteRequest``; ``malformed`` is non-empty when parsing failed."""

    resource_name: str = ""
    write_offset: int = 0
    finish_write: bool = False
    data: memoryview | bytes = b""
    malformed: str = ""


def parse_write_request(raw: bytes) -> WriteChunk:
    """Parse one serialized ``WriteRequest`` without copying its data."""
    chunk = WriteChunk()
    view = memoryview(raw)
    pos = 0
    end = len(raw)
    try:
        while pos < end:
            key, pos = decode_varint(raw, pos)
            field, wire = key >> 3, key & 7
            if wire == 0:
                value, pos = decode_varint(raw, pos)
                if field == 2:
                    chunk.write_offset = value - (1 << 64) if value >= 1 << 63 else value
                elif field == 3:
                    chunk.finish_write = value != 0
            elif wire == 2:
                length, pos = decode_varint(raw, pos)
                stop = pos + length
                if stop > end:
                    raise ValueError("length-delimited field runs past the end")
                if field == 1:
                    chunk.resource_name = bytes(view[pos:stop]).decode("utf-8")
                elif field == 10:
                    chunk.data = view[pos:stop]
                pos = stop
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise ValueError(f"unsupported wire type {wire}")
        if pos > end:
            raise ValueError("field runs past the end")
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        return WriteChunk(malformed=f"WriteRequest does not parse ({exc})")
    return chunk


_DATA_TAG = bytes([(10 << 3) | 2])


def serialize_read_response(data: bytes) -> bytes:
    """The serialized ``ReadResponse(data=data)``."""
    if not data:
        return b""
    return b"".join((_DATA_TAG, encode_varint(len(data)), data))
