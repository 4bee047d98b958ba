"""The one place where exceptions become gRPC statuses.

- ``lre.errors.LreError``: its own code and message (meant for the client).
  ``MissingBlobs`` additionally carries a ``google.rpc.PreconditionFailure``
  with one ``MISSING`` violation per blob, sent as rich status details in the
  ``grpc-status-details-bin`` trailer (Bazel retries on exactly that).
- An ``OSError`` of ``EMFILE`` or ``ENFILE`` (lre out of file descriptors):
  RESOURCE_EXHAUSTED saying so (``lre.errors.descriptors_exhausted``),
  logged without a traceback; clients retry it.
- Any other exception: INTERNAL with a fixed text; the traceback is logged
  once, and nothing of the exception's text reaches the client.

Client errors (every ``LreError`` except ``Internal``) are logged once at
INFO without a traceback.

Servicer methods use the ``unary_rpc`` / ``stream_rpc`` decorators, which
apply this mapping around the whole handler. The Execution servicer puts
``rpc_status_of(exc)`` into ``ExecuteResponse.status``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, TypeVar

import grpc
import grpc.aio

from lre.errors import CacheMiss, Internal, LreError, MissingBlobs, descriptors_exhausted
from lre.proto import error_details_pb2, status_pb2

logger = logging.getLogger("lre.service")

#: Trailer key of the serialized ``google.rpc.Status`` (gRPC rich status).
STATUS_DETAILS_KEY: Final = "grpc-status-details-bin"

#: Text sent to the client for any unexpected exception.
INTERNAL_MESSAGE: Final = "internal error (see server log)"

_GRPC_CODES: Final = {code.value[0]: code for code in grpc.StatusCode}


def rpc_status_of(exc: BaseException) -> status_pb2.Status:
    """The ``google.rpc.Status`` a client should see for ``exc``.

    ``LreError`` keeps its code and message; ``MissingBlobs`` gets a
    ``PreconditionFailure`` detail. Anything else is INTERNAL with a generic
    message (the caller logs the traceback; see ``log_exception``).
    """
    exc = descriptors_exhausted(exc) or exc
    if not isinstance(exc, LreError):
        return status_pb2.Status(code=Internal.code, message=INTERNAL_MESSAGE)
    status = status_pb2.Status(code=int(exc.code), message=exc.message)
    if isinstance(exc, MissingBlobs):
        failure = error_details_pb2.PreconditionFailure(
            violations=[
                error_details_pb2.PreconditionFailure.Violation(type="MISSING", subject=subject)
                for subject in exc.subjects
            ]
        )
        status.details.add().Pack(failure)
    return status


def log_exception(exc: BaseException, where: str) -> None:
    """Log ``exc`` once: cache misses at DEBUG, client errors at INFO,
    everything else with a traceback."""
    exc = descriptors_exhausted(exc) or exc
    if isinstance(exc, CacheMiss):
        logger.debug("%s: %s", where, exc.message)
    elif isinstance(exc, LreError) and not isinstance(exc, Internal):
        logger.info("%s: %s %s", where, exc.code.name, exc.message)
    else:
        logger.error("%s failed", where, exc_info=exc)


def grpc_code_of(status: status_pb2.Status) -> grpc.StatusCode:
    """The ``grpc.StatusCode`` with the number of ``status.code``."""
    return _GRPC_CODES.get(status.code, grpc.StatusCode.UNKNOWN)


async def abort_with(context: grpc.aio.ServicerContext[Any, Any], exc: BaseException) -> None:
    """End the RPC behind ``context`` with the status of ``exc``.

    Always raises (grpc's ``AbortError``), which grpc.aio turns into the status.
    """
    status = rpc_status_of(exc)
    trailers: tuple[tuple[str, str | bytes], ...] = ()
    if status.details:
        trailers = ((STATUS_DETAILS_KEY, status.SerializeToString()),)
    await context.abort(grpc_code_of(status), status.message, trailers)


S = TypeVar("S")
Req = TypeVar("Req")
Resp = TypeVar("Resp")

UnaryHandler = Callable[[S, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]
StreamHandler = Callable[[S, Req, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]]


def unary_rpc(method: UnaryHandler[S, Req, Resp]) -> UnaryHandler[S, Req, Resp]:
    """Decorate a servicer method returning one response: exceptions become statuses.

    ``asyncio.CancelledError`` (client gone) and grpc's own abort pass through.
    """

    @functools.wraps(method)
    async def handler(self: S, request: Req, context: grpc.aio.ServicerContext[Any, Any]) -> Resp:
        try:
            return await method(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            log_exception(exc, method.__name__)
            await abort_with(context, exc)
            raise AssertionError("unreachable: abort raises") from None

    return handler


def stream_rpc(method: StreamHandler[S, Req, Resp]) -> StreamHandler[S, Req, Resp]:
    """Decorate a servicer method yielding responses: exceptions become statuses."""

    @functools.wraps(method)
    async def handler(
        self: S, request: Req, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Resp]:
        try:
            async for response in method(self, request, context):
                yield response
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            log_exception(exc, method.__name__)
            await abort_with(context, exc)

    return handler
