"""The REAPI ``RequestMetadata`` header, read into the scheduler's ``RequestInfo``."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

from google.protobuf.message import DecodeError

from lre.proto import REQUEST_METADATA_KEY, re_pb2
from lre.scheduler import RequestInfo

logger = logging.getLogger("lre.service")

_NOTHING_SAID: Final = RequestInfo()


def request_metadata_from(metadata: Iterable[tuple[str, str | bytes]] | None) -> RequestInfo:
    """Read ``RequestMetadata`` from invocation metadata.

    The header is informational: when it is absent or does not parse, the
    result is empty (a malformed one is logged at DEBUG), never an error.
    Pass ``context.invocation_metadata()``.
    """
    if metadata is None:
        return _NOTHING_SAID
    for key, value in metadata:
        if key != REQUEST_METADATA_KEY:
            continue
        raw = value if isinstance(value, bytes) else value.encode("latin-1")
        message = re_pb2.RequestMetadata()
        try:
            message.ParseFromString(raw)
        except DecodeError:
            logger.debug("ignoring a %s header that does not parse", REQUEST_METADATA_KEY)
            return _NOTHING_SAID
        return RequestInfo.from_proto(message)
    return _NOTHING_SAID
