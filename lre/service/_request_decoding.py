"""Requests that do not parse become INVALID_ARGUMENT naming the message type.

Left to grpc, a request whose bytes are not a valid protobuf of the method's
request type fails with UNKNOWN, carries the parser's internal text to the
client and logs a traceback per call. ``parse_or_refusal`` wraps a method's
request deserializer so that it never raises: bytes that do not parse become
an ``Unparsable`` holding an ``InvalidArgument`` ("request: N bytes do not
parse as <type> (<method>)"). ``CallChecks`` (``_call_checks``) ends such a
unary call through the one status mapping (``_status``) before the handler
runs; for a stream of requests ``checked_requests`` raises the error when
the handler reads that message, and the servicer's own mapping sends it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from lre.errors import InvalidArgument

__all__ = ["Unparsable", "checked_requests", "parse_or_refusal"]


class Unparsable:
    """What the wrapped deserializer returns instead of raising."""

    __slots__ = ("error",)

    def __init__(self, error: InvalidArgument) -> None:
        self.error = error


def _type_name(deserializer: Callable[[bytes], Any]) -> str:
    owner = getattr(deserializer, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    name = getattr(descriptor, "full_name", None)
    return name if isinstance(name, str) else "the request type"


def parse_or_refusal(deserializer: Callable[[bytes], Any], method: str) -> Callable[[bytes], Any]:
    """``deserializer`` returning an ``Unparsable`` instead of raising."""
    type_name = _type_name(deserializer)

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception:
            return Unparsable(
                InvalidArgument(
                    f"request: {len(data)} bytes do not parse as {type_name} ({method})"
                )
            )

    return deserialize


async def checked_requests(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """``requests``, raising the ``InvalidArgument`` of the first one that
    did not parse."""
    async for request in requests:
        if isinstance(request, Unparsable):
            raise request.error
        yield request
