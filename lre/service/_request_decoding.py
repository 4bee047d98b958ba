"""Requests that do not parse become INVALID_ARGUMENT naming the message type.

Left to grpc, a request whose bytes are not a valid protobuf of the method's
request type fails with UNKNOWN, carries the parser's internal text to the
client and logs a traceback per call. ``RequestDecodingInterceptor`` wraps
each handler's request deserializer: a request that does not parse becomes
an ``InvalidArgument`` ("request: bytes do not parse as <type> ...") that
reaches the client through the one status mapping (``_status``), is logged
at INFO once per call, and never reaches a servicer method.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from lre.errors import InvalidArgument
from lre.service._status import abort_with, log_exception
from lre.service._wrapped_handlers import WrappedHandlers

Behavior = Callable[..., Any]


class _Unparsable:
    """What the wrapped deserializer returns instead of raising."""

    __slots__ = ("error",)

    def __init__(self, error: InvalidArgument) -> None:
        self.error = error


def _type_name(deserializer: Callable[[bytes], Any]) -> str:
    owner = getattr(deserializer, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    name = getattr(descriptor, "full_name", None)
    return name if isinstance(name, str) else "the request type"


def _guard(deserializer: Callable[[bytes], Any], method: str) -> Callable[[bytes], Any]:
    type_name = _type_name(deserializer)

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception:
            return _Unparsable(
                InvalidArgument(
                    f"request: {len(data)} bytes do not parse as {type_name} ({method})"
                )
            )

    return deserialize


async def _checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        if isinstance(request, _Unparsable):
            raise request.error
        yield request


def _unary_request(inner: Behavior, method: str) -> Behavior:
    async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if isinstance(request, _Unparsable):
            log_exception(request.error, method)
            await abort_with(context, request.error)
        result = inner(request, context)
        return await result if inspect.isawaitable(result) else result

    return call


def _unary_request_stream(inner: Behavior, method: str) -> Behavior:
    async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        if isinstance(request, _Unparsable):
            log_exception(request.error, method)
            await abort_with(context, request.error)
        result = inner(request, context)
        if hasattr(result, "__aiter__"):
            async for response in result:
                yield response
        elif inspect.isawaitable(result):  # a handler writing through context.write
            await result

    return call


def _stream_request(inner: Behavior) -> Behavior:
    async def call(
        requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> Any:
        result = inner(_checked(requests), context)
        return await result if inspect.isawaitable(result) else result

    return call


def _stream_request_stream(inner: Behavior) -> Behavior:
    async def call(
        requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        result = inner(_checked(requests), context)
        if hasattr(result, "__aiter__"):
            async for response in result:
                yield response
        elif inspect.isawaitable(result):
            await result

    return call


if TYPE_CHECKING:
    _InterceptorBase = grpc.aio.ServerInterceptor[Any, Any]
else:  # the runtime class is not generic
    _InterceptorBase = grpc.aio.ServerInterceptor


class RequestDecodingInterceptor(_InterceptorBase):
    """Turns unparsable requests into INVALID_ARGUMENT (see the module docstring).

    The wrapped handler of each method is built once and reused.
    """

    def __init__(self) -> None:
        self._wrapped = WrappedHandlers()

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler: grpc.RpcMethodHandler[Any, Any] | None = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler  # type: ignore[return-value]
        path = str(handler_call_details.method)
        method = path.rsplit("/", 1)[-1]
        return self._wrapped.get(path, handler, lambda inner: self._wrap(inner, method))

    @staticmethod
    def _wrap(
        handler: grpc.RpcMethodHandler[Any, Any], method: str
    ) -> grpc.RpcMethodHandler[Any, Any]:
        assert handler.request_deserializer is not None
        options: dict[str, Any] = {
            "request_deserializer": _guard(handler.request_deserializer, method),
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _unary_request(handler.unary_unary, method), **options
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _unary_request_stream(handler.unary_stream, method), **options
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                _stream_request(handler.stream_unary), **options
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                _stream_request_stream(handler.stream_stream), **options
            )
        return handler
