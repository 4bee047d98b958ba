"""Strict parsing of ByteStream resource names.

Accepted forms (``{instance}/`` is absent for the empty instance; instance
names may contain '/' but no empty segment and none of the reserved words
``blobs``, ``uploads``, ``compressed-blobs``)::

    {instance}/blobs/[{function}/]{hash}/{size}                       read
    {instance}/compressed-blobs/zstd/[{function}/]{hash}/{size}       read
    {instance}/uploads/{uuid}/blobs/[{function}/]{hash}/{size}[/...]  write
    {instance}/uploads/{uuid}/compressed-blobs/zstd/[{function}/]{hash}/{size}[/...]

``{function}`` is a lower-case digest function name (``sha256``); writes may
carry trailing metadata segments after the size, which are ignored.
Every failure is ``InvalidArgument`` naming the bad part and the name.
"""

from __future__ import annotations

from dataclasses import dataclass

from lre.digest import Digest, DigestFunction, resolve_digest_function
from lre.errors import InvalidArgument
from lre.service._digest_functions import check_digest_function

_FUNCTION_NAMES = {f.name.lower(): f for f in DigestFunction if f != DigestFunction.UNKNOWN}
_COMPRESSORS = ("zstd",)
_KNOWN_COMPRESSORS = ("identity", "zstd", "deflate", "brotli")
_MAX_SHOWN = 200


@dataclass(frozen=True, slots=True)
class BlobResource:
    """A parsed resource name.

    ``compressed`` is True for ``compressed-blobs/zstd``; ``upload_id`` is
    the ``{uuid}`` segment of upload names and ``None`` for reads.
    """

    instance_name: str
    digest: Digest
    compressed: bool
    upload_id: str | None
    digest_function: DigestFunction


def _shown(name: str) -> str:
    return repr(name if len(name) <= _MAX_SHOWN else name[:_MAX_SHOWN] + "...")


def _bad(name: str, what: str) -> InvalidArgument:
    return InvalidArgument(f"resource_name {_shown(name)}: {what}")


def _instance(parts: list[str], name: str) -> str:
    if any(p == "" for p in parts):
        raise _bad(name, "the instance name has an empty segment")
    return "/".join(parts)


def _blob_tail(
    parts: list[str], start: int, name: str, *, allow_trailing: bool
) -> tuple[Digest, bool, DigestFunction]:
    """Parse ``blobs/...`` or ``compressed-blobs/zstd/...`` from ``parts[start]``."""
    kind = parts[start]
    index = start + 1
    compressed = kind == "compressed-blobs"
    if compressed:
        if index >= len(parts):
            raise _bad(name, "the compressor is missing after 'compressed-blobs'")
        compressor = parts[index]
        if compressor not in _COMPRESSORS:
            known = "known but not supported" if compressor in _KNOWN_COMPRESSORS else "unknown"
            raise _bad(name, f"compressor {compressor!r} is {known} (supported: zstd)")
        index += 1
    function = DigestFunction.UNKNOWN
    if index < len(parts) and parts[index] in _FUNCTION_NAMES:
        try:
            function = resolve_digest_function(_FUNCTION_NAMES[parts[index]])
        except InvalidArgument as exc:
            raise _bad(name, exc.message) from None
        index += 1
    if len(parts) - index < 2:
        raise _bad(name, f"expected '{{hash}}/{{size}}' after '{kind}'")
    if not allow_trailing and len(parts) - index > 2:
        extra = "/".join(parts[index + 2 :])
        raise _bad(name, f"unexpected segments {extra!r} after the size")
    hash_hex, size_text = parts[index], parts[index + 1]
    if function == DigestFunction.UNKNOWN:
        try:
            function = check_digest_function(0, hash_hex)
        except InvalidArgument as exc:
            raise _bad(name, exc.message) from None
    if not (size_text.isascii() and size_text.isdigit()) or len(size_text) > 19:
        raise _bad(name, f"size {size_text!r} is not a non-negative decimal integer")
    try:
        digest = Digest.parse(hash_hex, int(size_text), field="resource_name")
    except InvalidArgument as exc:
        raise _bad(name, exc.message.removeprefix("resource_name.")) from None
    return digest, compressed, function


def parse_read_resource(name: str) -> BlobResource:
    """Parse a ByteStream Read name (``{instance}/blobs/...`` or ``compressed-blobs``)."""
    parts = name.split("/")
    for i, part in enumerate(parts):
        if part in ("blobs", "compressed-blobs"):
            instance = _instance(parts[:i], name)
            digest, compressed, function = _blob_tail(parts, i, name, allow_trailing=False)
            return BlobResource(instance, digest, compressed, None, function)
        if part == "uploads":
            raise _bad(name, "an upload name cannot be read; use '{instance}/blobs/...'")
    raise _bad(name, "expected '{instance}/blobs/{hash}/{size}'")


def parse_write_resource(name: str) -> BlobResource:
    """Parse a ByteStream Write name (``{instance}/uploads/{uuid}/blobs/...``)."""
    parts = name.split("/")
    for i, part in enumerate(parts):
        if part == "uploads":
            instance = _instance(parts[:i], name)
            if i + 1 >= len(parts) or parts[i + 1] == "":
                raise _bad(name, "the upload id after 'uploads/' is missing")
            upload_id = parts[i + 1]
            if i + 2 >= len(parts) or parts[i + 2] not in ("blobs", "compressed-blobs"):
                raise _bad(name, "expected 'blobs/' or 'compressed-blobs/' after the upload id")
            digest, compressed, function = _blob_tail(parts, i + 2, name, allow_trailing=True)
            return BlobResource(instance, digest, compressed, upload_id, function)
        if part in ("blobs", "compressed-blobs"):
            raise _bad(name, "a write needs '{instance}/uploads/{uuid}/blobs/{hash}/{size}'")
    raise _bad(name, "expected '{instance}/uploads/{uuid}/blobs/{hash}/{size}'")
