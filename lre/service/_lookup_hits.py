"""``LookupHitInterceptor``: every ``GetActionResult`` hit goes to the history.

A client that finds an action in the cache never calls Execute, so the
scheduler never sees it; this interceptor records the hit (with the
``RequestMetadata`` the client sent: tool invocation id, target, mnemonic)
as an ``lre.snapshot.ActionRecord`` of source ``lookup_hit``. Only
``GetActionResult`` calls are wrapped; every other method's handler is
returned untouched, so the cost elsewhere is one string comparison. The
hook runs on the gRPC thread and must be thread-safe; an exception it
raises is logged and ignored (the client still gets its result).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from lre.service._metadata import request_metadata_from
from lre.snapshot import ActionRecord, Source

__all__ = ["LookupHitInterceptor"]

log = logging.getLogger(__name__)

_METHOD = "/build.bazel.remote.execution.v2.ActionCache/GetActionResult"

if TYPE_CHECKING:
    _InterceptorBase = grpc.aio.ServerInterceptor[Any, Any]
else:  # the runtime class is not generic
    _InterceptorBase = grpc.aio.ServerInterceptor


class LookupHitInterceptor(_InterceptorBase):
    """See the module docstring; ``hook`` receives each hit's record."""

    def __init__(self, hook: Callable[[ActionRecord], None]) -> None:
        self._hook = hook

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler: grpc.RpcMethodHandler[Any, Any] | None = await continuation(handler_call_details)
        if handler is None or handler_call_details.method != _METHOD or handler.unary_unary is None:
            return handler  # type: ignore[return-value]
        inner = handler.unary_unary
        hook = self._hook
        details = handler_call_details

        async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = time.time()
            result: Any = inner(request, context)  # type: ignore[arg-type]
            if inspect.isawaitable(result):
                result = await result
            try:
                hook(_hit(request, details, result, started))
            except Exception:
                log.exception("recording a GetActionResult hit failed")
            return result

        return grpc.unary_unary_rpc_method_handler(
            call,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _hit(
    request: Any, details: grpc.HandlerCallDetails, result: Any, started: float
) -> ActionRecord:
    metadata = request_metadata_from(details.invocation_metadata)
    tool = f"{metadata.tool_name} {metadata.tool_version}".strip()
    return ActionRecord(
        at=time.time(),
        source=Source.LOOKUP_HIT,
        invocation=metadata.tool_invocation_id,
        tool=tool,
        instance=str(getattr(request, "instance_name", "")),
        target=metadata.target_id,
        mnemonic=metadata.action_mnemonic,
        action=str(request.action_digest.hash),
        exit_code=int(getattr(result, "exit_code", 0)),
        submitted_at=started,
    )
