"""The REAPI ``RequestMetadata`` header and lre's ``x-lre-repository``
header, read into the scheduler's ``RequestInfo``."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

from google.protobuf.message import DecodeError

from lre.proto import REQUEST_METADATA_KEY, re_pb2
from lre.scheduler import RequestInfo

#: lre's own header: which repository the client builds (``lre link`` writes it
#: into ``lre.bazelrc`` as ``--remote_header``, so every call carries it). It
#: names a build and the learner's history (``lre.scheduler.kind_key``); no
#: upstream call carries it.
REPOSITORY_KEY: Final = "x-lre-repository"

#: Longest repository header read; the rest is ignored.
_MAX_REPOSITORY = 256

logger = logging.getLogger("lre.service")

_NOTHING_SAID: Final = RequestInfo()


def request_metadata_from(metadata: Iterable[tuple[str, str | bytes]] | None) -> RequestInfo:
    """Read ``RequestMetadata`` and ``x-lre-repository`` from invocation metadata.

    Both headers are informational: when absent or when ``RequestMetadata``
    does not parse, the fields are empty (a malformed one is logged at DEBUG),
    never an error. Pass ``context.invocation_metadata()``.
    """
    if metadata is None:
        return _NOTHING_SAID
    message: re_pb2.RequestMetadata | None = None
    seen_metadata = False
    repository = ""
    for key, value in metadata:
        if key == REPOSITORY_KEY and not repository:
            text = value if isinstance(value, str) else value.decode("utf-8", "replace")
            repository = text[:_MAX_REPOSITORY].strip()
        elif key == REQUEST_METADATA_KEY and not seen_metadata:
            seen_metadata = True
            raw = value if isinstance(value, bytes) else value.encode("latin-1")
            message = re_pb2.RequestMetadata()
            try:
                message.ParseFromString(raw)
            except DecodeError:
                logger.debug("ignoring a %s header that does not parse", REQUEST_METADATA_KEY)
                message = None
    if message is None and not repository:
        return _NOTHING_SAID
    return RequestInfo.from_proto(message, repository)
