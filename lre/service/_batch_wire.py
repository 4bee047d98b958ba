"""Serialized batch responses built directly from their parts (no message per blob).

Building a ``BatchReadBlobsResponse`` of 1,000 blobs with protobuf costs a
message object per response and two copies of every blob (into the message,
then into the serialized form). Here each response is framed by hand and the
whole message is one ``b"".join``: one copy of every blob. The encoding is
protobuf's (checked against protobuf by the tests):

- ``BatchReadBlobsResponse``: field 1 ``responses`` of ``Response`` {1
  ``digest``, 2 ``data``, 3 ``status``};
- ``BatchUpdateBlobsResponse``: field 1 ``responses`` of ``Response`` {1
  ``digest``, 2 ``status``};
- ``Digest``: 1 ``hash``, 2 ``size_bytes``.

Servicers return these bytes through ``serialize_response``, which passes
bytes through and serializes messages (the general paths still build them).
"""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import Message

from lre.digest import Digest
from lre.proto import status_pb2
from lre.service._varint import encode_varint


def digest_field(digest: Digest) -> bytes:
    """Field 1 of a ``Response`` holding ``digest`` (tag, length, ``Digest``)."""
    body = b"\x0a" + encode_varint(len(digest.hash)) + digest.hash.encode("ascii")
    if digest.size_bytes:
        body += b"\x10" + encode_varint(digest.size_bytes)
    return b"\x0a" + encode_varint(len(body)) + body


def _status_bytes(status: status_pb2.Status) -> bytes:
    encoded: bytes = status.SerializeToString()
    return encoded


def read_response(
    digest_fields: Sequence[bytes], outcomes: Sequence[bytes | status_pb2.Status]
) -> bytes:
    """A serialized ``BatchReadBlobsResponse``: data, or a status per blob."""
    parts: list[bytes] = []
    add = parts.extend
    varint = encode_varint
    for field, outcome in zip(digest_fields, outcomes, strict=True):
        if isinstance(outcome, bytes):
            if outcome:
                size = len(outcome)
                head = varint(size)
                add((b"\x0a", varint(len(field) + 1 + len(head) + size), field))
                add((b"\x12", head, outcome))
            else:
                add((b"\x0a", varint(len(field)), field))
        else:
            status = _status_bytes(outcome)
            head = varint(len(status))
            add((b"\x0a", varint(len(field) + 1 + len(head) + len(status)), field))
            add((b"\x1a", head, status))
    return b"".join(parts)


def update_response(
    digest_fields: Sequence[bytes], statuses: Sequence[status_pb2.Status | None]
) -> bytes:
    """A serialized ``BatchUpdateBlobsResponse``: OK (no status) or a status per blob."""
    parts: list[bytes] = []
    add = parts.extend
    varint = encode_varint
    for field, status in zip(digest_fields, statuses, strict=True):
        if status is None:
            add((b"\x0a", varint(len(field)), field))
        else:
            encoded = _status_bytes(status)
            head = varint(len(encoded))
            add((b"\x0a", varint(len(field) + 1 + len(head) + len(encoded)), field))
            add((b"\x12", head, encoded))
    return b"".join(parts)


def serialize_response(response: Message | bytes) -> bytes:
    """grpc response serializer: bytes as they are, messages serialized."""
    if isinstance(response, bytes):
        return response
    encoded: bytes = response.SerializeToString()
    return encoded
