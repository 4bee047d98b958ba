"""WrappedHandlers, and the one interceptor that keeps its wrappers with it:
a wrapper is made once per method and inner handler, and still does its
work on every call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import pytest
import trio

from lre.errors import InvalidArgument
from lre.service._call_checks import CallChecks
from lre.service._request_decoding import Unparsable
from lre.service._rpc_metrics import RpcMetrics
from lre.service._wrapped_handlers import WrappedHandlers

if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
else:  # the runtime class is not generic
    Handler = grpc.RpcMethodHandler
PATH = "/build.bazel.remote.execution.v2.ContentAddressableStorage/FindMissingBlobs"


class _Details(grpc.HandlerCallDetails):
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


class _Context:
    """What the metrics wrapper reads of a ServicerContext: no code set."""

    def code(self) -> None:
        return None


def _handler(answer: str) -> Handler:
    async def behavior(request: Any, context: Any) -> str:
        return f"{answer}:{request}"

    return grpc.unary_unary_rpc_method_handler(
        behavior, request_deserializer=bytes.decode, response_serializer=str.encode
    )


def _continuation(handler: Handler) -> Callable[[Any], Awaitable[Handler]]:
    async def continuation(details: Any) -> Handler:
        return handler

    return continuation


def test_a_wrapper_is_made_once_per_method_and_inner_handler() -> None:
    made: list[Handler] = []

    def wrap(inner: Handler) -> Handler:
        made.append(inner)
        return _handler(f"wrapped {len(made)}")

    cache = WrappedHandlers()
    inner = _handler("inner")
    first = cache.get(PATH, inner, wrap)
    assert cache.get(PATH, inner, wrap) is first
    assert made == [inner]
    # Another method gets its own wrapper.
    other = cache.get(PATH + "2", inner, wrap)
    assert other is not first and len(made) == 2


def test_a_new_inner_handler_gets_a_new_wrapper_which_is_then_kept() -> None:
    cache = WrappedHandlers()
    count = 0

    def wrap(inner: Handler) -> Handler:
        nonlocal count
        count += 1
        return _handler(f"wrapped {count}")

    first = cache.get(PATH, _handler("a"), wrap)
    replacement = _handler("b")
    second = cache.get(PATH, replacement, wrap)
    assert second is not first
    assert cache.get(PATH, replacement, wrap) is second
    assert count == 2


def test_past_the_limit_new_methods_are_wrapped_per_call() -> None:
    cache = WrappedHandlers(limit=1)
    count = 0

    def wrap(inner: Handler) -> Handler:
        nonlocal count
        count += 1
        return _handler(f"wrapped {count}")

    inner = _handler("inner")
    kept = cache.get("/a/A", inner, wrap)
    assert cache.get("/a/A", inner, wrap) is kept
    assert cache.get("/b/B", inner, wrap) is not cache.get("/b/B", inner, wrap)
    assert count == 3


async def test_the_one_interceptor_keeps_its_wrapper_and_checks_every_call() -> None:
    metrics = RpcMetrics()
    checks = CallChecks(metrics=metrics)
    inner = _handler("inner")
    handlers = [
        await checks.intercept_service(_continuation(inner), _Details(PATH)) for _ in range(3)
    ]
    await trio.lowlevel.checkpoint()
    handlers.append(await checks.intercept_service(_continuation(inner), _Details(PATH)))
    assert all(h is handlers[0] for h in handlers)
    behavior = handlers[0].unary_unary
    deserialize = handlers[0].request_deserializer
    assert behavior is not None and deserialize is not None
    # Request decoding still runs: bytes decode as before, bad bytes become a refusal.
    assert deserialize(b"x") == "x"
    assert isinstance(deserialize(b"\xff"), Unparsable)
    context: Any = _Context()
    for n in range(3):
        assert await behavior(n, context) == f"inner:{n}"
    (method,) = metrics.statistics().methods
    assert (method.method, method.count, dict(method.codes)) == (
        "ContentAddressableStorage/FindMissingBlobs",
        3,
        {"OK": 3},
    )


async def test_a_streamed_request_that_did_not_parse_stops_the_handler_reading() -> None:
    checks = CallChecks()

    async def behavior(requests: Any, context: Any) -> str:
        return ",".join([request async for request in requests])

    inner = grpc.stream_unary_rpc_method_handler(
        behavior, request_deserializer=bytes.decode, response_serializer=str.encode
    )
    handler = await checks.intercept_service(
        _continuation(inner), _Details("/google.bytestream.ByteStream/Write")
    )
    behavior_checked = handler.stream_unary
    deserialize = handler.request_deserializer
    assert behavior_checked is not None and deserialize is not None

    async def requests(*raw: bytes) -> Any:
        for message in raw:
            yield deserialize(message)

    context: Any = _Context()
    assert await behavior_checked(requests(b"a", b"b"), context) == "a,b"
    with pytest.raises(InvalidArgument):
        await behavior_checked(requests(b"a", b"\xff", b"b"), context)
