"""Reading a long list of ``Digest`` messages from protobuf bytes in bulk.

Walking a repeated ``Digest`` field of a parsed protobuf message costs a
Python wrapper object per element and again per ``.hash`` access (about
0.7 us each); 10,000 digests cost more than the whole rest of a
FindMissingBlobs call. ``scan_digest_list`` instead finds every element of
the field in the message's canonical serialization with one regular
expression, and hands back the hashes, the sizes and each element's own
bytes (which are, unchanged, an element of any other message's repeated
``Digest`` field with the same field number).

It is a fast path only: it returns ``None`` whenever the bytes are not the
plain canonical shape it expects (other fields between the elements, an
unknown field, a hash that is not 64 lowercase hex characters, a negative or
oversized size, non-minimal encodings). The caller then takes the general
path, which validates each digest and names the bad one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lre.digest import MAX_BLOB_SIZE

#: One element: tag (one byte, set by the caller), length, then ``Digest``:
#: field 1 (hash, 64 bytes), optionally field 2 (size, a minimal varint of
#: at most 6 bytes, enough for MAX_BLOB_SIZE). Matched on the message
#: decoded as latin-1 (one character per byte), so hashes come out as
#: ``str`` without decoding each. Groups: length byte, hash, size field
#: (empty when the size is 0).
_ELEMENT = "%s([\x42-\x49])\n@(.{64})((?:\x10[\x80-\xff]{0,5}[\x01-\x7f])?)"

_HEX_DIGITS = b"0123456789abcdef"

#: The length byte of an element whose size field has ``n`` characters.
_LENGTH_CHARS = [chr(66 + n) for n in range(8)]


class _SizeFields(dict[str, int]):
    """Decoded size fields (``"\\x10" + varint`` -> value), filled on demand.

    Bounded: cleared when it holds ``_SIZES_MAX`` entries.
    """

    def __missing__(self, field: str) -> int:
        value = 0
        for shift, char in enumerate(field[1:]):
            value |= (ord(char) & 0x7F) << (7 * shift)
        if len(self) >= _SIZES_MAX:
            self.clear()
        self[field] = value
        return value


_SIZES_MAX = 1 << 16
_SIZES = _SizeFields()


@dataclass(frozen=True, slots=True)
class DigestList:
    """The elements of one repeated ``Digest`` field, in order.

    ``hashes[i]`` and ``sizes[i]`` are element ``i``'s validated values;
    ``elements(indexes)`` serializes chosen elements again.
    """

    hashes: list[str]
    sizes: list[int]
    _size_fields: list[str]
    _tag: str
    _region: bytes

    def fields(self, field_number: int) -> list[bytes]:
        """Every element again, as field ``field_number`` (1..15) of another message."""
        tag = chr(field_number << 3 | 2)
        lengths = _LENGTH_CHARS
        return [
            (tag + lengths[len(f)] + "\n@" + h + f).encode("latin-1")
            for h, f in zip(self.hashes, self._size_fields, strict=True)
        ]

    def elements(self, indexes: list[int]) -> bytes:
        """The serialized elements at ``indexes`` (in that order), concatenated."""
        if len(indexes) == len(self.hashes) and indexes == list(range(len(indexes))):
            return self._region
        hashes, fields, tag, lengths = self.hashes, self._size_fields, self._tag, _LENGTH_CHARS
        return "".join(
            [tag + lengths[len(fields[i])] + "\n@" + hashes[i] + fields[i] for i in indexes]
        ).encode("latin-1")


class DigestListScanner:
    """Finds the elements of repeated ``Digest`` field ``field_number``.

    ``scan(raw, start, stop, count)`` looks at ``raw[start:stop]``, which
    must hold nothing but ``count`` elements of that field (the caller skips
    the message's other fields, which canonical serialization puts before
    and after).
    """

    def __init__(self, field_number: int) -> None:
        if not 1 <= field_number <= 15:
            raise ValueError(f"field_number: {field_number} must be in 1..15 (one-byte tag)")
        self._tag = chr(field_number << 3 | 2)
        self._pattern = re.compile(_ELEMENT % re.escape(self._tag), re.DOTALL)

    def scan(self, raw: bytes, start: int, stop: int, count: int) -> DigestList | None:
        """The ``count`` elements in ``raw[start:stop]``, or ``None`` (see the module docstring)."""
        region = raw[start:stop]
        text = region.decode("latin-1")
        found = self._pattern.findall(text)
        if len(found) != count or count == 0:
            return None
        lengths = [f[0] for f in found]
        hashes = [f[1] for f in found]
        size_fields = [f[2] for f in found]
        # The elements must tile the region: no character between or after them.
        if 68 * count + sum(map(len, size_fields)) != len(text):
            return None
        # Each element's length byte must match what follows it.
        if "".join(lengths) != "".join(map(_LENGTH_CHARS.__getitem__, map(len, size_fields))):
            return None
        if "".join(hashes).encode("latin-1").translate(None, _HEX_DIGITS):
            return None  # some hash is not lowercase hex
        sizes = list(map(_SIZES.__getitem__, size_fields))
        if max(sizes) > MAX_BLOB_SIZE:
            return None
        return DigestList(hashes, sizes, size_fields, self._tag, region)


def span_between(raw: bytes, head: bytes, tail: bytes) -> tuple[int, int] | None:
    """``(start, stop)`` of what lies between ``head`` and ``tail`` in ``raw``.

    ``head`` and ``tail`` are the canonical serializations of the message's
    fields before and after the repeated field (serialized on their own);
    ``None`` when ``raw`` does not begin with ``head`` and end with ``tail``.
    """
    stop = len(raw) - len(tail)
    if stop < len(head) or not raw.startswith(head) or not raw.endswith(tail):
        return None
    return len(head), stop
