"""The REAPI ``RequestMetadata`` header, read into a frozen dataclass."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from google.protobuf.message import DecodeError

from lre.proto import re_pb2

#: Header Bazel and Buck2 send with every call (binary, base64 on the wire;
#: grpc hands it to the server already decoded).
REQUEST_METADATA_KEY: Final = "build.bazel.remote.execution.v2.requestmetadata-bin"

logger = logging.getLogger("lre.service")


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestMetadata:
    """Who sent a request and for which action; empty strings when unknown."""

    tool_name: str = ""
    tool_version: str = ""
    action_id: str = ""
    tool_invocation_id: str = ""
    correlated_invocations_id: str = ""
    action_mnemonic: str = ""
    target_id: str = ""
    configuration_id: str = ""


EMPTY_REQUEST_METADATA: Final = RequestMetadata()


def request_metadata_from(metadata: Iterable[tuple[str, str | bytes]] | None) -> RequestMetadata:
    """Read ``RequestMetadata`` from invocation metadata.

    The header is informational: when it is absent or does not parse, the
    result is empty (a malformed one is logged at DEBUG), never an error.
    Pass ``context.invocation_metadata()``.
    """
    if metadata is None:
        return EMPTY_REQUEST_METADATA
    for key, value in metadata:
        if key != REQUEST_METADATA_KEY:
            continue
        raw = value if isinstance(value, bytes) else value.encode("latin-1")
        message = re_pb2.RequestMetadata()
        try:
            message.ParseFromString(raw)
        except DecodeError:
            logger.debug("ignoring a %s header that does not parse", REQUEST_METADATA_KEY)
            return EMPTY_REQUEST_METADATA
        return RequestMetadata(
            tool_name=message.tool_details.tool_name,
            tool_version=message.tool_details.tool_version,
            action_id=message.action_id,
            tool_invocation_id=message.tool_invocation_id,
            correlated_invocations_id=message.correlated_invocations_id,
            action_mnemonic=message.action_mnemonic,
            target_id=message.target_id,
            configuration_id=message.configuration_id,
        )
    return EMPTY_REQUEST_METADATA
