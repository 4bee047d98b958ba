"""The asyncio<->Trio bridge and the status mapping, through a real server.

A test servicer (raw-bytes methods registered with a generic handler) runs
Trio code behind each call, so the tests can observe the Trio side.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import grpc.aio
import pytest
import trio

from lre.cas import MemoryStore
from lre.errors import InvalidArgument, MissingBlobs
from lre.proto import error_details_pb2, re_pb2, status_pb2
from lre.service import InstanceBackends, TrioBridge
from lre.service._status import (
    INTERNAL_MESSAGE,
    STATUS_DETAILS_KEY,
    rpc_status_of,
    stream_rpc,
    unary_rpc,
)
from tests._support.reapi import open_channel
from tests._support.servers import start_server
from tests.service.conftest import eventually

Context = grpc.aio.ServicerContext[Any, Any]
SERVICE = "lre.test.Probe"


class Probe:
    """Trio-side behaviours selected by the request bytes."""

    def __init__(self, bridge: TrioBridge) -> None:
        self.bridge = bridge
        self.stream_started = trio.Event()
        self.stream_cancelled = trio.Event()
        self.received: list[bytes] = []
        self.now_threads: list[int] = []
        self.now_tasks: list[trio.lowlevel.Task] = []

    def register(self, server: grpc.aio.Server) -> None:
        handlers = {
            "Unary": grpc.unary_unary_rpc_method_handler(self.Unary),
            "Stream": grpc.unary_stream_rpc_method_handler(self.Stream),
            "Upload": grpc.stream_unary_rpc_method_handler(self.Upload),
            "Now": grpc.unary_unary_rpc_method_handler(self.Now),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))

    @unary_rpc
    async def Unary(self, request: bytes, context: Context) -> bytes:
        async def work() -> bytes:
            await trio.lowlevel.checkpoint()
            if request == b"invalid":
                raise InvalidArgument("field: value 'x' is wrong")
            if request == b"missing":
                raise MissingBlobs(["blobs/" + "a" * 64 + "/3"])
            if request == b"crash":
                raise KeyError("secret internal detail /home/me")
            if request == b"sleep":  # long enough that only a cancellation ends it
                await trio.sleep(30)
            return b"echo:" + request

        return await self.bridge.call(work)

    @unary_rpc
    async def Now(self, request: bytes, context: Context) -> bytes:
        def work() -> bytes:
            self.now_threads.append(threading.get_ident())
            self.now_tasks.append(trio.lowlevel.current_task())
            if request == b"invalid":
                raise InvalidArgument("field: value 'y' is wrong")
            return b"now:" + request

        return await self.bridge.call_now(work)

    @stream_rpc
    async def Stream(self, request: bytes, context: Context) -> AsyncIterator[bytes]:
        count = int(request) if request else -1

        async def produce() -> AsyncIterator[bytes]:
            self.stream_started.set()
            index = 0
            try:
                while count < 0 or index < count:
                    yield str(index).encode()
                    index += 1
                    await trio.lowlevel.checkpoint()
                    if count < 0:
                        await trio.sleep(0.001)
            except trio.Cancelled:
                self.stream_cancelled.set()
                raise
            if count == 3:
                raise InvalidArgument("stream: failed after 3 items")

        async for item in self.bridge.stream(produce, buffer=4):
            yield item

    @unary_rpc
    async def Upload(self, request_iterator: AsyncIterator[bytes], context: Context) -> bytes:
        async def consume(requests: AsyncIterator[bytes]) -> bytes:
            total = 0
            async for piece in requests:
                if piece == b"stop":
                    return b"stopped early"
                self.received.append(piece)
                total += len(piece)
            return str(total).encode()

        return await self.bridge.call_with_requests(consume, request_iterator, buffer=2)


async def start_probe(nursery: trio.Nursery) -> tuple[str, Probe, TrioBridge]:
    probes: list[Probe] = []

    def extra(bridge: TrioBridge) -> list[Any]:
        probes.append(Probe(bridge))
        return probes

    store = MemoryStore(max_bytes=1 << 20)
    address, bridge, _ = await start_server(nursery, {"": InstanceBackends(cas=store)}, extra=extra)
    return address, probes[0], bridge


def unary(channel: grpc.Channel, payload: bytes, **kwargs: Any) -> bytes:
    method = channel.unary_unary(f"/{SERVICE}/Unary")
    return bytes(method(payload, **kwargs))


async def test_unary_round_trip_and_errors(nursery: trio.Nursery, caplog: Any) -> None:
    address, _, _ = await start_probe(nursery)
    with open_channel(address) as channel:
        assert await trio.to_thread.run_sync(unary, channel, b"hi") == b"echo:hi"

        with pytest.raises(grpc.RpcError) as info:
            await trio.to_thread.run_sync(unary, channel, b"invalid")
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == "field: value 'x' is wrong"

        caplog.set_level(logging.INFO, logger="lre.service")
        with pytest.raises(grpc.RpcError) as info:
            await trio.to_thread.run_sync(unary, channel, b"crash")
        assert info.value.code() == grpc.StatusCode.INTERNAL
        assert info.value.details() == INTERNAL_MESSAGE
        assert "secret" not in str(info.value.debug_error_string())
        crash_logs = [r for r in caplog.records if r.exc_info and "secret" in str(r.exc_info[1])]
        assert len(crash_logs) == 1


async def test_missing_blobs_carry_precondition_failure(nursery: trio.Nursery) -> None:
    address, _, _ = await start_probe(nursery)
    with open_channel(address) as channel, pytest.raises(grpc.RpcError) as info:
        await trio.to_thread.run_sync(unary, channel, b"missing")
    error: Any = info.value
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    details = dict(error.trailing_metadata())[STATUS_DETAILS_KEY]
    status = status_pb2.Status.FromString(details)
    assert status.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    failure = error_details_pb2.PreconditionFailure()
    assert status.details[0].Unpack(failure)
    assert [(v.type, v.subject) for v in failure.violations] == [
        ("MISSING", "blobs/" + "a" * 64 + "/3")
    ]


def test_rpc_status_of_for_execute_responses() -> None:
    status = rpc_status_of(MissingBlobs(["blobs/x/1", "blobs/y/2"]))
    assert status.code == 9
    assert len(status.details) == 1
    assert rpc_status_of(RuntimeError("boom")) == status_pb2.Status(
        code=13, message=INTERNAL_MESSAGE
    )
    assert rpc_status_of(InvalidArgument("a: b")).message == "a: b"


async def test_server_stream_and_trailing_error(nursery: trio.Nursery) -> None:
    address, _, _ = await start_probe(nursery)

    def collect(payload: bytes) -> list[bytes]:
        with open_channel(address) as channel:
            return [bytes(x) for x in channel.unary_stream(f"/{SERVICE}/Stream")(payload)]

    assert await trio.to_thread.run_sync(collect, b"50") == [str(i).encode() for i in range(50)]
    with pytest.raises(grpc.RpcError) as info:
        await trio.to_thread.run_sync(collect, b"3")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_client_cancel_cancels_trio_stream(nursery: trio.Nursery) -> None:
    address, probe, bridge = await start_probe(nursery)
    got: list[bytes] = []

    def read_some_then_cancel() -> None:
        with open_channel(address) as channel:
            call: Any = channel.unary_stream(f"/{SERVICE}/Stream")(b"")
            for item in call:
                got.append(bytes(item))
                if len(got) == 20:
                    call.cancel()
                    break

    await trio.to_thread.run_sync(read_some_then_cancel)
    assert got == [str(i).encode() for i in range(20)]
    with trio.fail_after(5):
        await probe.stream_cancelled.wait()
    await eventually(lambda: bridge.statistics().running == 0)


async def test_deadline_cancels_trio_task(nursery: trio.Nursery) -> None:
    address, _, bridge = await start_probe(nursery)
    with open_channel(address) as channel:
        # Connected first: the deadline is then the call's, not the connect's.
        assert await trio.to_thread.run_sync(unary, channel, b"hi") == b"echo:hi"
        cancelled = bridge.statistics().cancelled_total
        # On a busy machine a deadline can pass before the call's Trio task
        # even starts (nothing to cancel then): try again with a longer one.
        timeout = 0.2
        for _ in range(6):
            started = bridge.statistics().started_total
            with pytest.raises(grpc.RpcError) as info:
                await trio.to_thread.run_sync(
                    functools.partial(unary, channel, b"sleep", timeout=timeout)
                )
            assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            # The task sleeps 30 s unless the deadline cancels it.
            await eventually(lambda: bridge.statistics().running == 0)
            if bridge.statistics().started_total > started:
                break
            timeout *= 2
        else:
            pytest.fail("no sleeping call reached its Trio task before its deadline")
    assert bridge.statistics().cancelled_total >= cancelled + 1


async def test_client_streaming_with_backpressure_and_early_return(
    nursery: trio.Nursery,
) -> None:
    address, probe, _ = await start_probe(nursery)

    def upload(pieces: list[bytes]) -> bytes:
        with open_channel(address) as channel:
            return bytes(channel.stream_unary(f"/{SERVICE}/Upload")(iter(pieces)))

    pieces = [bytes([i % 256]) * 1000 for i in range(200)]
    assert await trio.to_thread.run_sync(upload, pieces) == b"200000"
    assert probe.received == pieces

    def endless() -> Iterator[bytes]:
        yield b"a"
        yield b"stop"
        while True:
            yield b"more"

    def upload_endless() -> bytes:
        with open_channel(address) as channel:
            return bytes(channel.stream_unary(f"/{SERVICE}/Upload")(endless()))

    assert await trio.to_thread.run_sync(upload_endless) == b"stopped early"


async def test_five_thousand_concurrent_calls_lose_none(nursery: trio.Nursery) -> None:
    store = MemoryStore(max_bytes=1 << 20)
    address, _, _ = await start_server(nursery, {"": InstanceBackends(cas=store)})

    def burst() -> list[int]:
        with open_channel(address) as channel:
            stub = channel.unary_unary(
                "/build.bazel.remote.execution.v2.ContentAddressableStorage/FindMissingBlobs",
                request_serializer=re_pb2.FindMissingBlobsRequest.SerializeToString,
                response_deserializer=re_pb2.FindMissingBlobsResponse.FromString,
            )
            digest = re_pb2.Digest(hash="b" * 64, size_bytes=7)
            request = re_pb2.FindMissingBlobsRequest(blob_digests=[digest])
            futures = [stub.future(request) for _ in range(5000)]
            return [len(f.result(timeout=120).missing_blob_digests) for f in futures]

    results = await trio.to_thread.run_sync(burst)
    assert results == [1] * 5000


async def test_stopped_server_refuses_and_bridge_reports_unavailable(
    nursery: trio.Nursery,
) -> None:
    bridge = TrioBridge()
    with pytest.raises(Exception) as info:
        # Not started: the asyncio side must not hang.
        import asyncio

        async def call() -> bytes:
            return await bridge.call(trio.lowlevel.checkpoint)  # type: ignore[arg-type]

        asyncio.run(call())
    assert "shutting down" in str(info.value)

    async with trio.open_nursery() as inner:
        address, _, _ = await start_probe(inner)
        with open_channel(address) as channel:
            assert await trio.to_thread.run_sync(unary, channel, b"x") == b"echo:x"
            inner.cancel_scope.cancel()
    with open_channel(address) as channel:
        with pytest.raises(grpc.RpcError) as info2:
            await trio.to_thread.run_sync(lambda: unary(channel, b"x", timeout=2))
        assert info2.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_call_now_runs_on_the_trio_thread_without_a_request_task(
    nursery: trio.Nursery,
) -> None:
    address, probe, bridge = await start_probe(nursery)
    before = bridge.statistics()

    def now(channel: grpc.Channel, payload: bytes) -> bytes:
        return bytes(channel.unary_unary(f"/{SERVICE}/Now")(payload))

    with open_channel(address) as channel:
        assert await trio.to_thread.run_sync(now, channel, b"hi") == b"now:hi"
        with pytest.raises(grpc.RpcError) as info:
            await trio.to_thread.run_sync(now, channel, b"invalid")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == "field: value 'y' is wrong"
    assert probe.now_threads == [threading.get_ident()] * 2  # this test runs on the Trio thread
    # Both ran in Trio's own task that drains the hop's callbacks, not in a
    # task made for the call.
    assert probe.now_tasks[0] is probe.now_tasks[1]
    assert probe.now_tasks[0].parent_nursery is not bridge._nursery
    after = bridge.statistics()
    assert after.started_total == before.started_total  # no request task
    assert after.immediate_total == before.immediate_total + 2
