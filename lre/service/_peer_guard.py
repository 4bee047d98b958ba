"""Refusing gRPC calls that come from lre's own actions.

``ActionPeerInterceptor`` is the outermost interceptor of every listener: it
wraps each registered method so that, before the handler runs, the call's
peer (``context.peer()``, which an interceptor itself does not see) is judged
by ``LocalPeers`` (``_local_peers.py``). A call from a connection that belongs
to a process lre started ends with PERMISSION_DENIED naming the reason, and
the handler never runs: an action cannot store an action result, submit an
Execute, or read lre's CAS through lre's own port. A verdict is cached per
connection, so a call costs one netlink lookup (about 8 us); the first call
of a new connection reads ``/proc`` of lre's descendants off the event loop,
in one thread of its own (lookups queue there: a burst of new connections
costs lre one thread, not one per connection).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from lre.service._local_peers import LocalPeers, PeerVerdict
from lre.service._wrapped_handlers import WrappedHandlers

__all__ = ["ActionPeerInterceptor"]

log = logging.getLogger("lre.service.peers")

#: Refusals logged (each names the peer and reason); later ones are only counted.
_MAX_LOGGED = 100

Behavior = Callable[..., Any]

if TYPE_CHECKING:
    _InterceptorBase = grpc.aio.ServerInterceptor[Any, Any]
else:  # the runtime class is not generic
    _InterceptorBase = grpc.aio.ServerInterceptor


class ActionPeerInterceptor(_InterceptorBase):
    """See the module docstring. ``listening_on`` must be called with the
    bound address before the server starts (until then nothing is refused)."""

    def __init__(self, peers: LocalPeers) -> None:
        self.peers = peers
        self.host = ""
        self.port = 0
        self._logged = 0
        self._wrapped = WrappedHandlers()
        #: Where new connections' holders are looked up (started on first use).
        self._lookups = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lre-peer-guard")

    def listening_on(self, host: str, port: int) -> None:
        self.host = host.strip("[]")
        self.port = port

    async def _verdict(self, context: grpc.aio.ServicerContext[Any, Any]) -> PeerVerdict:
        peer = context.peer() or ""
        if not self.port:
            return PeerVerdict(True)
        verdict = self.peers.judge(peer, self.port, self.host, cached_only=True)
        if verdict is None:
            loop = asyncio.get_running_loop()
            verdict = await loop.run_in_executor(
                self._lookups, lambda: self.peers.judge(peer, self.port, self.host)
            )
        assert verdict is not None
        if not verdict.allowed and self._logged < _MAX_LOGGED:
            self._logged += 1
            log.warning("refused a call from %s: %s (PERMISSION_DENIED)", peer, verdict.reason)
        return verdict

    async def _refuse(
        self, context: grpc.aio.ServicerContext[Any, Any], verdict: PeerVerdict
    ) -> None:
        await context.abort(
            grpc.StatusCode.PERMISSION_DENIED,
            f"lre does not serve its own actions: {verdict.reason}",
        )

    def _unary(self, inner: Behavior) -> Behavior:
        async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            verdict = await self._verdict(context)
            if not verdict.allowed:
                await self._refuse(context, verdict)
            result: Any = inner(request, context)
            if inspect.isawaitable(result):
                result = await result
            return result

        return call

    def _stream(self, inner: Behavior) -> Behavior:
        async def call(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            verdict = await self._verdict(context)
            if not verdict.allowed:
                await self._refuse(context, verdict)
            result: Any = inner(request, context)
            if inspect.isasyncgen(result) or hasattr(result, "__aiter__"):
                async for response in result:
                    yield response
            elif inspect.isawaitable(result):  # a handler that uses context.write
                await result

        return call

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler: grpc.RpcMethodHandler[Any, Any] | None = await continuation(handler_call_details)
        if handler is None or not self.peers.available:
            return handler  # type: ignore[return-value]
        return self._wrapped.get(str(handler_call_details.method), handler, self._guarded)

    def _guarded(self, handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
        """``handler`` with the peer judged before it runs."""
        options: dict[str, Any] = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self._unary(handler.unary_unary), **options)
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(handler.stream_unary), **options
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(handler.unary_stream), **options
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._stream(handler.stream_stream), **options
            )
        return handler
