"""Digest type, validation and digest-function resolution."""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lre.errors import InvalidArgument

if TYPE_CHECKING:
    from lre.proto import re_pb2

#: Largest blob lre accepts (1 TiB); anything larger is an obvious mistake.
MAX_BLOB_SIZE = 1 << 40

_HEX = frozenset("0123456789abcdef")


class DigestFunction(enum.IntEnum):
    """Values of ``DigestFunction.Value`` in the REAPI (same numbers)."""

    UNKNOWN = 0
    SHA256 = 1
    SHA1 = 2
    MD5 = 3
    VSO = 4
    SHA384 = 5
    SHA512 = 6
    MURMUR3 = 7
    SHA256TREE = 8
    BLAKE3 = 9

    @property
    def hex_length(self) -> int:
        """Length of a hash of this function in hex characters (0 if unknown)."""
        return _HEX_LENGTH.get(self, 0)


_HEX_LENGTH = {
    DigestFunction.SHA256: 64,
    DigestFunction.SHA1: 40,
    DigestFunction.MD5: 32,
    DigestFunction.SHA384: 96,
    DigestFunction.SHA512: 128,
    DigestFunction.BLAKE3: 64,
    DigestFunction.SHA256TREE: 64,
}

#: The digest functions lre computes. SHA256 is what both Bazel and Buck2 use
#: by default; BLAKE3 has the same hash length and cannot be told apart.
SUPPORTED_DIGEST_FUNCTIONS = (DigestFunction.SHA256,)


def resolve_digest_function(value: int, hash_hex: str | None = None) -> DigestFunction:
    """Return the digest function a request means.

    ``value`` is the request's ``digest_function`` field. When it is unset
    (0; Buck2 never sets it) the function is inferred from the length of
    ``hash_hex``, and a 64-character hash means SHA256.

    Raises ``InvalidArgument`` naming the value when the function is unknown
    or not one lre supports.
    """
    if value == DigestFunction.UNKNOWN:
        if hash_hex is None or len(hash_hex) == 64:
            return DigestFunction.SHA256
        raise InvalidArgument(
            f"digest_function: unset, and a hash of {len(hash_hex)} hex characters "
            "matches no supported function (supported: SHA256, 64 characters)"
        )
    try:
        function = DigestFunction(value)
    except ValueError:
        raise InvalidArgument(f"digest_function: unknown value {value}") from None
    if function not in SUPPORTED_DIGEST_FUNCTIONS:
        raise InvalidArgument(
            f"digest_function: {function.name} is not supported (supported: SHA256)"
        )
    return function


@dataclass(frozen=True, slots=True, order=True)
class Digest:
    """A SHA256 content address: lowercase hex ``hash`` and ``size_bytes``.

    Construct with ``Digest.parse`` or ``Digest.from_proto`` when the values
    come from outside; the plain constructor does not validate.
    """

    hash: str
    size_bytes: int

    @classmethod
    def parse(cls, hash_hex: str, size_bytes: int, *, field: str = "digest") -> Digest:
        """Validate and build a digest.

        Raises ``InvalidArgument`` naming ``field`` and the bad value when the
        hash is not 64 lowercase hex characters or the size is negative or
        larger than ``MAX_BLOB_SIZE``.
        """
        if len(hash_hex) != 64 or not _HEX.issuperset(hash_hex):
            shown = hash_hex if len(hash_hex) <= 80 else hash_hex[:80] + "..."
            raise InvalidArgument(
                f"{field}.hash: {shown!r} is not a SHA256 hash (64 lowercase hex characters)"
            )
        if size_bytes < 0:
            raise InvalidArgument(f"{field}.size_bytes: {size_bytes} is negative")
        if size_bytes > MAX_BLOB_SIZE:
            raise InvalidArgument(
                f"{field}.size_bytes: {size_bytes} exceeds the largest blob lre "
                f"accepts ({MAX_BLOB_SIZE} bytes)"
            )
        return cls(hash_hex, size_bytes)

    @classmethod
    def from_proto(cls, message: re_pb2.Digest, *, field: str = "digest") -> Digest:
        """Validate a protobuf ``Digest``; see ``parse`` for the errors."""
        return cls.parse(message.hash, message.size_bytes, field=field)

    def to_proto(self) -> re_pb2.Digest:
        from lre.proto import re_pb2

        return re_pb2.Digest(hash=self.hash, size_bytes=self.size_bytes)

    @property
    def subject(self) -> str:
        """The resource form used in PreconditionFailure: ``blobs/{hash}/{size}``."""
        return f"blobs/{self.hash}/{self.size_bytes}"

    def __str__(self) -> str:
        return f"{self.hash}/{self.size_bytes}"


def digest_of(data: bytes) -> Digest:
    """The SHA256 digest of ``data``."""
    return Digest(hashlib.sha256(data).hexdigest(), len(data))


#: The digest of the empty blob, which every CAS holds implicitly.
EMPTY_DIGEST = digest_of(b"")
