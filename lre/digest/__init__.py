"""Content digests: a frozen ``Digest`` used everywhere inside lre.

Protobuf ``Digest`` messages are converted at the edges with
``Digest.from_proto`` (which validates) and ``Digest.to_proto``.
"""

from lre.digest._digest import (
    EMPTY_DIGEST,
    MAX_BLOB_SIZE,
    Digest,
    DigestFunction,
    digest_of,
    resolve_digest_function,
)

__all__ = [
    "EMPTY_DIGEST",
    "MAX_BLOB_SIZE",
    "Digest",
    "DigestFunction",
    "digest_of",
    "resolve_digest_function",
]
