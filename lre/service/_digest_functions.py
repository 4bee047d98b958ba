"""Which digest function a request means, checked before its digests are parsed."""

from __future__ import annotations

from lre.digest import DigestFunction, resolve_digest_function

_HEX = frozenset("0123456789abcdef")
_OTHER_LENGTHS = frozenset(f.hex_length for f in DigestFunction if f.hex_length not in (0, 64))


def check_digest_function(value: int, sample_hash: str | None) -> DigestFunction:
    """Resolve the request's ``digest_function`` (``value``, 0 when unset).

    When unset, the function is inferred from ``sample_hash`` (one of the
    request's hashes): a hex hash of another function's length (MD5, SHA1,
    SHA384, SHA512) is rejected naming the length; anything else is taken
    as SHA256 and left for digest parsing to report with its field name.
    Raises ``InvalidArgument`` for unknown or unsupported functions.
    """
    if value == 0 and (
        sample_hash is None
        or len(sample_hash) not in _OTHER_LENGTHS
        or not _HEX.issuperset(sample_hash)
    ):
        return DigestFunction.SHA256
    return resolve_digest_function(value, sample_hash)
