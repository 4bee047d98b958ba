"""A thin REAPI Execution front for the cluster lre in tests.

lre's own Execution servicer is being written separately; until it is
registered by ``lre.app``, the cluster gets this adapter: Execute and
WaitExecution over the cluster's real scheduler, through its real
``TrioBridge``. Snapshots become Operations as the REAPI says (stage in
the metadata, result and status in the ExecuteResponse).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc.aio

from lre.proto import operations_pb2, re_grpc, re_pb2, status_pb2
from lre.scheduler import OperationSnapshot


def operation_of(snapshot: OperationSnapshot) -> operations_pb2.Operation:
    metadata = re_pb2.ExecuteOperationMetadata(
        stage=int(snapshot.stage), action_digest=snapshot.action_key.action_digest.to_proto()
    )
    operation = operations_pb2.Operation(name=snapshot.name, done=snapshot.done)
    operation.metadata.Pack(metadata)
    if snapshot.done:
        response = re_pb2.ExecuteResponse(
            cached_result=snapshot.cached_result, message=snapshot.message
        )
        if snapshot.result is not None:
            response.result.CopyFrom(snapshot.result)
        if snapshot.error is not None:
            response.status.CopyFrom(
                status_pb2.Status(code=int(snapshot.error.code), message=snapshot.error.message)
            )
        operation.response.Pack(response)
    return operation


class ExecutionAdapter(re_grpc.ExecutionServicer):  # type: ignore[misc]
    def __init__(self, bridge: Any, scheduler: Any) -> None:
        self.bridge = bridge
        self.scheduler = scheduler

    def register(self, server: grpc.aio.Server) -> None:
        re_grpc.add_ExecutionServicer_to_server(self, server)

    async def _follow(self, name: str) -> AsyncIterator[operations_pb2.Operation]:
        async with self.scheduler.watch(name) as updates:
            async for snapshot in updates:
                yield operation_of(snapshot)

    async def Execute(
        self, request: re_pb2.ExecuteRequest, context: Any
    ) -> AsyncIterator[operations_pb2.Operation]:
        async def updates() -> AsyncIterator[operations_pb2.Operation]:
            snapshot = self.scheduler.submit(request)
            async for operation in self._follow(snapshot.name):
                yield operation

        async for operation in self.bridge.stream(updates):
            yield operation

    async def WaitExecution(
        self, request: re_pb2.WaitExecutionRequest, context: Any
    ) -> AsyncIterator[operations_pb2.Operation]:
        async for operation in self.bridge.stream(lambda: self._follow(request.name)):
            yield operation
