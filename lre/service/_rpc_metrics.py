"""RPC counts by method and status code, and latency histograms by method.

``RpcMetrics`` is the recorder: ``record(method, code, seconds)`` is a lock,
a dict lookup and a few integer increments, safe from any thread (grpc.aio
runs handlers on its own asyncio thread; ``/metrics`` reads from Trio).
``RpcMetricsInterceptor`` is a grpc.aio server interceptor that times every
call of a registered method and records how it ended; pass it in
``ServerOptions(interceptors=(metrics.interceptor(),))``.

Labels stay bounded: the method label is ``Service/Method`` of a method that
has a handler (so only methods lre registers), ``unknown`` for a call to any
other path, and ``other`` once ``max_methods`` distinct methods were seen.
Codes are ``grpc.StatusCode`` names. Nothing per request (digests, resource
names, operation ids) ever becomes a label.
"""

from __future__ import annotations

import asyncio
import bisect
import inspect
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from lre.service._invocation_spans import InvocationSpans
from lre.service._wrapped_handlers import WrappedHandlers

__all__ = [
    "LATENCY_BUCKETS_S",
    "MethodStatistics",
    "RpcMetrics",
    "RpcMetricsInterceptor",
    "RpcStatistics",
    "method_label",
]

#: Upper bounds (seconds) of the latency histogram buckets. Unary calls land
#: in the low buckets; Execute / WaitExecution streams last as long as their
#: action, hence the long tail.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    1800.0,
)

UNKNOWN_METHOD = "unknown"
OVERFLOW_METHOD = "other"


def method_label(full_method: str) -> str:
    """``/build.bazel.remote.execution.v2.Execution/Execute`` -> ``Execution/Execute``."""
    service, _, method = full_method.lstrip("/").partition("/")
    return f"{service.rsplit('.', 1)[-1]}/{method}" if method else UNKNOWN_METHOD


@dataclass(frozen=True, slots=True)
class MethodStatistics:
    """Totals for one method. ``bucket_counts[i]`` counts calls that took at most
    ``buckets[i]`` seconds and more than ``buckets[i-1]`` (not cumulative);
    calls slower than the last bucket are only in ``count``."""

    method: str
    codes: Mapping[str, int]
    bucket_counts: tuple[int, ...]
    count: int
    sum_seconds: float


@dataclass(frozen=True, slots=True)
class RpcStatistics:
    buckets: tuple[float, ...]
    methods: tuple[MethodStatistics, ...]


class _Method:
    __slots__ = ("buckets", "codes", "count", "total")

    def __init__(self, size: int) -> None:
        self.codes: dict[str, int] = {}
        self.buckets = [0] * size
        self.count = 0
        self.total = 0.0


class RpcMetrics:
    """Thread-safe recorder of RPC outcomes; see the module docstring."""

    def __init__(
        self, buckets: tuple[float, ...] = LATENCY_BUCKETS_S, *, max_methods: int = 64
    ) -> None:
        if list(buckets) != sorted(set(buckets)) or not buckets:
            raise ValueError(f"latency buckets must be increasing and non-empty, got {buckets}")
        self.buckets = tuple(float(b) for b in buckets)
        self.max_methods = max_methods
        self._lock = threading.Lock()
        self._methods: dict[str, _Method] = {}

    def record(self, method: str, code: str, seconds: float) -> None:
        """Count one finished call of ``method`` (a label, see ``method_label``)."""
        index = bisect.bisect_left(self.buckets, seconds)
        with self._lock:
            entry = self._methods.get(method)
            if entry is None:
                if len(self._methods) >= self.max_methods:
                    method = OVERFLOW_METHOD
                    entry = self._methods.get(method)
                if entry is None:
                    entry = self._methods[method] = _Method(len(self.buckets))
            entry.codes[code] = entry.codes.get(code, 0) + 1
            if index < len(entry.buckets):
                entry.buckets[index] += 1
            entry.count += 1
            entry.total += seconds

    def statistics(self) -> RpcStatistics:
        with self._lock:
            methods = tuple(
                MethodStatistics(
                    method=name,
                    codes=MappingProxyType(dict(entry.codes)),
                    bucket_counts=tuple(entry.buckets),
                    count=entry.count,
                    sum_seconds=entry.total,
                )
                for name, entry in sorted(self._methods.items())
            )
        return RpcStatistics(self.buckets, methods)

    def interceptor(
        self, *, lookup_hits: LookupHook | None = None, spans: InvocationSpans | None = None
    ) -> RpcMetricsInterceptor:
        """The interceptor timing every call; with ``lookup_hits``, each
        successful ``GetActionResult`` is also handed to it (``_lookup_hits``),
        and with ``spans`` each call's start and end go to it (its build's
        span, ``_invocation_spans``), in the same wrapper, so no call pays
        for a second interceptor."""
        return RpcMetricsInterceptor(self, lookup_hits, spans)


def _code_name(context: grpc.aio.ServicerContext[Any, Any], failure: BaseException | None) -> str:
    """How the call ended: the code the handler set or aborted with, else
    CANCELLED for a cancelled task, UNKNOWN for another exception, else OK."""
    code: Any = None
    try:
        code = context.code()
    except Exception:  # an older grpc without ServicerContext.code()
        code = None
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int) and code:
        for member in grpc.StatusCode:
            if member.value[0] == code:
                return member.name
    if failure is None:
        return "OK"
    if isinstance(failure, asyncio.CancelledError):
        return "CANCELLED"
    return "UNKNOWN"


Behavior = Callable[..., Any]
#: Called with (request, context, response) after a successful GetActionResult.
LookupHook = Callable[[Any, Any, Any], None]
LOOKUP_METHOD = "/build.bazel.remote.execution.v2.ActionCache/GetActionResult"


def _timed_unary(
    inner: Behavior,
    method: str,
    metrics: RpcMetrics,
    after: LookupHook | None = None,
    spans: InvocationSpans | None = None,
) -> Behavior:
    async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        started = time.perf_counter()
        failure: BaseException | None = None
        span = spans.opened(context.invocation_metadata()) if spans is not None else None
        try:
            result: Any = inner(request, context)
            if inspect.isawaitable(result):
                result = await result
            if after is not None:
                after(request, context, result)
            return result
        except BaseException as exc:
            failure = exc
            raise
        finally:
            metrics.record(method, _code_name(context, failure), time.perf_counter() - started)
            if span is not None and spans is not None:
                spans.closed(span)

    return call


def _timed_stream(
    inner: Behavior, method: str, metrics: RpcMetrics, spans: InvocationSpans | None = None
) -> Behavior:
    async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        started = time.perf_counter()
        failure: BaseException | None = None
        span = spans.opened(context.invocation_metadata()) if spans is not None else None
        try:
            result: Any = inner(request, context)
            if inspect.isasyncgen(result) or hasattr(result, "__aiter__"):
                async for response in result:
                    yield response
            elif inspect.isawaitable(result):  # a handler that uses context.write
                await result
        except BaseException as exc:
            failure = exc
            raise
        finally:
            metrics.record(method, _code_name(context, failure), time.perf_counter() - started)
            if span is not None and spans is not None:
                spans.closed(span)

    return call


if TYPE_CHECKING:
    _InterceptorBase = grpc.aio.ServerInterceptor[Any, Any]
else:  # the runtime class is not generic
    _InterceptorBase = grpc.aio.ServerInterceptor


class RpcMetricsInterceptor(_InterceptorBase):
    """Times every call of a registered method; see the module docstring."""

    def __init__(
        self,
        metrics: RpcMetrics,
        lookup_hits: LookupHook | None = None,
        spans: InvocationSpans | None = None,
    ) -> None:
        self.metrics = metrics
        self.lookup_hits = lookup_hits
        self.spans = spans
        self._wrapped = WrappedHandlers()

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler: grpc.RpcMethodHandler[Any, Any] | None = await continuation(handler_call_details)
        if handler is None:  # grpc answers UNIMPLEMENTED; the path may be anything
            self.metrics.record(UNKNOWN_METHOD, grpc.StatusCode.UNIMPLEMENTED.name, 0.0)
            return None  # type: ignore[return-value]
        path = handler_call_details.method
        return self._wrapped.get(str(path), handler, lambda inner: self._timed(inner, path))

    def _timed(
        self, handler: grpc.RpcMethodHandler[Any, Any], path: str
    ) -> grpc.RpcMethodHandler[Any, Any]:
        """``handler`` with each call timed and counted under its method."""
        method = method_label(path)
        metrics = self.metrics
        spans = self.spans
        options: dict[str, Any] = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            after = self.lookup_hits if path == LOOKUP_METHOD else None
            return grpc.unary_unary_rpc_method_handler(
                _timed_unary(handler.unary_unary, method, metrics, after, spans), **options
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                _timed_unary(handler.stream_unary, method, metrics, None, spans), **options
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _timed_stream(handler.unary_stream, method, metrics, spans), **options
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                _timed_stream(handler.stream_stream, method, metrics, spans), **options
            )
        return handler
