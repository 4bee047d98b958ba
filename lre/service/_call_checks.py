"""Every check a gRPC call passes, in one interceptor around one wrapper per method.

``CallChecks`` is the only interceptor lre puts on a listener. For each call:

1. **token** (``_auth.BearerToken``, when the listener has
   ``auth_token_file``): a call without the listener's bearer token ends at
   once with UNAUTHENTICATED; its request is never parsed, no handler runs
   and it is not counted in the RPC metrics.
2. The method's handler is looked up; a path without one is counted as
   ``unknown`` (UNIMPLEMENTED, which grpc answers itself).
3. The method's wrapper, made once per method (``WrappedHandlers``) and
   reused by every later call, runs around the servicer's handler:

   - **peer** (``_peer_guard.PeerGuard``, only when some containment leaves
     its actions on lre's own network): a call from one of lre's own actions
     ends with PERMISSION_DENIED before the handler runs;
   - **decode** (``_request_decoding``): a request whose bytes do not parse
     ends with INVALID_ARGUMENT naming the message type, without reaching
     the handler;
   - **metrics** (``_rpc_metrics.RpcMetrics``): the call is timed and
     counted under its method and the code it ended with (refusals of the
     peer and decode checks included); a successful ``GetActionResult`` is
     also handed to the lookup hook (``_lookup_hits``), and its start and
     end go to its build's span (``_invocation_spans``).

One wrapper means one extra coroutine frame per call, where four
interceptors stacked made four (and four ``intercept_service`` awaits).
Used from grpc.aio's event loop thread only.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from lre.service._auth import BearerToken
from lre.service._invocation_spans import InvocationSpans, OpenCall
from lre.service._peer_guard import PeerGuard
from lre.service._request_decoding import Unparsable, checked_requests, parse_or_refusal
from lre.service._rpc_metrics import (
    LOOKUP_METHOD,
    UNKNOWN_METHOD,
    LookupHook,
    RpcMetrics,
    code_name,
    method_label,
)
from lre.service._status import abort_with, log_exception
from lre.service._wrapped_handlers import WrappedHandlers

__all__ = ["CallChecks"]

Behavior = Callable[..., Any]
Context = grpc.aio.ServicerContext[Any, Any]

if TYPE_CHECKING:
    _InterceptorBase = grpc.aio.ServerInterceptor[Any, Any]
    Handler = grpc.RpcMethodHandler[Any, Any]
else:  # the runtime classes are not generic
    _InterceptorBase = grpc.aio.ServerInterceptor
    Handler = grpc.RpcMethodHandler


class _Checks:
    """What one method's wrapper does before and after its handler."""

    __slots__ = ("guard", "label", "method", "metrics", "spans")

    def __init__(
        self,
        guard: PeerGuard | None,
        metrics: RpcMetrics | None,
        spans: InvocationSpans | None,
        path: str,
    ) -> None:
        self.guard = guard
        self.metrics = metrics
        self.spans = spans
        self.label = method_label(path)
        self.method = path.rsplit("/", 1)[-1]

    def opened(self, context: Context) -> OpenCall | None:
        """The call's place in its build's span (None without spans or an
        invocation id); called first, so the span starts with the request."""
        if self.spans is None:
            return None
        return self.spans.opened(context.invocation_metadata())

    async def before(self, request: Any, context: Context, *, streamed: bool) -> Any:
        """What to hand the handler: ``request``, or where the requests come
        as a stream (``streamed``), that stream checked message by message
        as it is read. Ends the call (``context.abort`` raises) when its
        peer is one of lre's actions or its request did not parse."""
        if self.guard is not None:
            await self.guard.check(context)
        if streamed:
            return checked_requests(request)
        if isinstance(request, Unparsable):
            log_exception(request.error, self.method)
            await abort_with(context, request.error)
        return request

    def after(
        self, context: Context, code: str | None, started: float, span: OpenCall | None
    ) -> None:
        """Counts the call and ends its span; ``code``: how it failed, None
        when it did not."""
        if self.metrics is not None:
            self.metrics.record(
                self.label, code or code_name(context, None), time.perf_counter() - started
            )
        if span is not None and self.spans is not None:
            self.spans.closed(span)


def _unary_response(
    checks: _Checks, inner: Behavior, streamed: bool, hook: LookupHook | None = None
) -> Behavior:
    """A wrapper for a handler that returns one response; ``streamed``: its
    requests come as a stream, checked message by message as it reads them."""

    async def call(request: Any, context: Context) -> Any:
        started = time.perf_counter()
        span = checks.opened(context)
        code: str | None = None  # the exception is not kept: no cycle through its frames
        try:
            request = await checks.before(request, context, streamed=streamed)
            result: Any = inner(request, context)
            if inspect.isawaitable(result):
                result = await result
            if hook is not None:
                hook(request, context, result)
            return result
        except BaseException as exc:
            code = code_name(context, exc)
            raise
        finally:
            checks.after(context, code, started, span)

    return call


def _stream_response(checks: _Checks, inner: Behavior, streamed: bool) -> Behavior:
    """A wrapper for a handler that streams its responses (or writes them
    through ``context.write``); ``streamed`` as for ``_unary_response``."""

    async def call(request: Any, context: Context) -> AsyncIterator[Any]:
        started = time.perf_counter()
        span = checks.opened(context)
        code: str | None = None
        result: Any = None
        try:
            request = await checks.before(request, context, streamed=streamed)
            result = inner(request, context)
            if inspect.isasyncgen(result) or hasattr(result, "__aiter__"):
                async for response in result:
                    yield response
            elif inspect.isawaitable(result):
                await result
        except BaseException as exc:
            code = code_name(context, exc)
            raise
        finally:
            # A call that ends early (the client cancelled, grpc closed this
            # generator) closes the handler's stream now, which cancels what
            # it was producing, instead of when the collector finds it.
            if inspect.isasyncgen(result):
                await result.aclose()
            checks.after(context, code, started, span)

    return call


class CallChecks(_InterceptorBase):
    """See the module docstring. Every part is optional: without any the
    wrapper still turns unparsable requests into INVALID_ARGUMENT."""

    def __init__(
        self,
        *,
        token: BearerToken | None = None,
        guard: PeerGuard | None = None,
        metrics: RpcMetrics | None = None,
        lookup_hits: LookupHook | None = None,
        spans: InvocationSpans | None = None,
    ) -> None:
        self.token = token
        self.spans = spans
        self.guard = guard
        self.metrics = metrics
        self.lookup_hits = lookup_hits
        self._wrapped = WrappedHandlers()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler:
        if self.token is not None:
            refusal = self.token.refusal(handler_call_details)
            if refusal is not None:
                return refusal
        handler: Handler | None = await continuation(handler_call_details)
        path = str(handler_call_details.method)
        if handler is None:  # grpc answers UNIMPLEMENTED; the path may be anything
            if self.metrics is not None:
                self.metrics.record(UNKNOWN_METHOD, grpc.StatusCode.UNIMPLEMENTED.name, 0.0)
            return None  # type: ignore[return-value]
        return self._wrapped.get(path, handler, lambda inner: self._wrap(inner, path))

    def _wrap(self, handler: Handler, path: str) -> Handler:
        """``handler`` inside this method's one wrapper."""
        guard = self.guard if self.guard is not None and self.guard.active else None
        checks = _Checks(guard, self.metrics, self.spans, path)
        deserializer = handler.request_deserializer
        options: dict[str, Any] = {
            "request_deserializer": (
                parse_or_refusal(deserializer, checks.method) if deserializer else None
            ),
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            hook = self.lookup_hits if path == LOOKUP_METHOD else None
            return grpc.unary_unary_rpc_method_handler(
                _unary_response(checks, handler.unary_unary, False, hook), **options
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                _unary_response(checks, handler.stream_unary, True), **options
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _stream_response(checks, handler.unary_stream, False), **options
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                _stream_response(checks, handler.stream_stream, True), **options
            )
        return handler
