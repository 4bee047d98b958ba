"""An Execution service that answers at once: the floor of Bazel's remote path.

``InstantExecutor(upstream)`` listens on a loopback port of its own and serves
two services for a Bazel told ``--remote_executor=grpc://<its port>
--remote_cache=grpc://<upstream>`` (so every CAS, ByteStream and action cache
call goes straight to ``upstream``, an lre):

- ``Capabilities.GetCapabilities``: the upstream's answer, passed on;
- ``Execution.Execute``: the result the upstream's action cache already holds
  for the action (``GetActionResult``, one loopback call), sent back as the
  one finished Operation; when there is none the Execute is forwarded to the
  upstream and its stream passed on (counted in ``forwarded``: such an action
  did not get an instant answer).

So a build against it does everything Bazel does for a remote action except
wait for a run: the edit loop's side that runs right after lre's side of the
same round (same action keys: one output base's actions are another's) gets
every result in one action-cache read. ``served`` counts the instant answers
and ``answer_seconds`` their time at this server (the floor is not zero: one
loopback GetActionResult). Raises ``RuntimeError`` from ``__enter__`` when
the server does not start.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator

import grpc

from lre.proto import operations_pb2, re_grpc, re_pb2


class _Services(re_grpc.ExecutionServicer, re_grpc.CapabilitiesServicer):  # type: ignore[misc]
    def __init__(self, owner: InstantExecutor, channel: grpc.aio.Channel) -> None:
        self.owner = owner
        self.cache = re_grpc.ActionCacheStub(channel)
        self.execution = re_grpc.ExecutionStub(channel)
        self.capabilities = re_grpc.CapabilitiesStub(channel)

    async def GetCapabilities(
        self, request: re_pb2.GetCapabilitiesRequest, context: grpc.aio.ServicerContext
    ) -> re_pb2.ServerCapabilities:
        return await self.capabilities.GetCapabilities(request)

    async def Execute(
        self, request: re_pb2.ExecuteRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[operations_pb2.Operation]:
        started = time.monotonic()
        try:
            result = await self.cache.GetActionResult(
                re_pb2.GetActionResultRequest(
                    instance_name=request.instance_name, action_digest=request.action_digest
                )
            )
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise
            self.owner.forwarded += 1
            async for operation in self.execution.Execute(request):
                yield operation
            return
        operation = operations_pb2.Operation(
            name=f"instant/{request.action_digest.hash}", done=True
        )
        operation.response.Pack(re_pb2.ExecuteResponse(result=result))
        self.owner.served += 1
        self.owner.answer_seconds.append(time.monotonic() - started)
        yield operation


class InstantExecutor:
    """See the module docstring; use as a context manager, ``address`` is its port."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.address = ""
        self.served = 0
        self.forwarded = 0
        self.answer_seconds: list[float] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: grpc.aio.Server | None = None
        self._channel: grpc.aio.Channel | None = None

    async def _start(self) -> str:
        self._channel = grpc.aio.insecure_channel(self.upstream)
        services = _Services(self, self._channel)
        self._server = grpc.aio.server()
        re_grpc.add_ExecutionServicer_to_server(services, self._server)
        re_grpc.add_CapabilitiesServicer_to_server(services, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        return f"127.0.0.1:{port}"

    async def _stop(self) -> None:
        if self._server is not None:
            await self._server.stop(1)
        if self._channel is not None:
            await self._channel.close()

    def __enter__(self) -> InstantExecutor:
        self._thread.start()
        try:
            self.address = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        except Exception as error:
            raise RuntimeError(f"the instant executor did not start: {error}") from error
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            # Its self-pipe sockets go with it (left to the garbage
            # collector they were a ResourceWarning in some later test).
            self._loop.close()
