"""``google.longrunning.Operations`` over the schedulers' operations.

- GetOperation: the current state (NOT_FOUND when unknown or expired).
- ListOperations: ``name`` is the instance name (a trailing ``/operations``
  or a bare ``operations`` is accepted too); ``filter`` may be empty,
  ``done=true`` or ``done=false``; pages of ``page_size`` (default 100, at
  most 1,000) with an opaque ``page_token``.
- CancelOperation: ends a queued or running operation with CANCELLED (its
  process tree is killed); finished ones are left alone.
- DeleteOperation: forgets the operation (a running action still finishes).
- WaitOperation: returns once the operation is done or ``timeout`` passed
  (default 60 s, at most 600 s), with the state at that moment. While it
  waits it counts as a watcher, so the operation is not abandoned.
"""

from __future__ import annotations

import functools
from typing import Any

import grpc
import grpc.aio
import trio
from google.longrunning import operations_pb2_grpc
from google.protobuf import empty_pb2

from lre.errors import InvalidArgument
from lre.proto import operations_pb2
from lre.scheduler import ActionScheduler
from lre.service._bridge import TrioBridge
from lre.service._instances import Instances
from lre.service._status import unary_rpc
from lre.service.execution import backend_for_instance, backend_for_operation, operation_of

Context = grpc.aio.ServicerContext[Any, Any]

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
DEFAULT_WAIT_S = 60.0
MAX_WAIT_S = 600.0


def _instance_of_collection(name: str) -> str:
    if name == "operations":
        return ""
    return name.removesuffix("/operations")


def list_page(
    backend: ActionScheduler, request: operations_pb2.ListOperationsRequest
) -> operations_pb2.ListOperationsResponse:
    """One page of ListOperations (see the module docstring); ``InvalidArgument``
    naming the field for an unsupported filter or a bad page token/size."""
    done: bool | None
    if request.filter in ("", "done=true", "done=false"):
        done = None if not request.filter else request.filter == "done=true"
    else:
        raise InvalidArgument(
            f"filter: {request.filter!r} is not supported (use '', 'done=true' or 'done=false')"
        )
    if request.page_size < 0:
        raise InvalidArgument(f"page_size: {request.page_size} is negative")
    size = min(request.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    try:
        start = int(request.page_token or "0")
    except ValueError:
        raise InvalidArgument(
            f"page_token: {request.page_token!r} is not a token lre gave"
        ) from None
    if start < 0:
        raise InvalidArgument(f"page_token: {request.page_token!r} is not a token lre gave")
    snapshots = backend.list_operations(_instance_of_collection(request.name))
    if done is not None:
        snapshots = [s for s in snapshots if s.done == done]
    page = snapshots[start : start + size]
    response = operations_pb2.ListOperationsResponse(operations=[operation_of(s) for s in page])
    if start + size < len(snapshots):
        response.next_page_token = str(start + size)
    return response


async def wait_operation(
    backend: ActionScheduler, name: str, timeout_s: float
) -> operations_pb2.Operation:
    """(Trio) the operation once done, or its state after ``timeout_s``."""
    async with backend.watch(name) as updates:
        last = None
        with trio.move_on_after(timeout_s):
            async for snapshot in updates:
                last = snapshot
                if snapshot.done:
                    break
    return operation_of(last if last is not None else backend.get_operation(name))


class OperationsServicer:
    """``google.longrunning.Operations`` for the execution operations."""

    def __init__(self, bridge: TrioBridge, instances: Instances) -> None:
        self._bridge = bridge
        self._instances = instances

    def register(self, server: grpc.aio.Server) -> None:
        operations_pb2_grpc.add_OperationsServicer_to_server(self, server)

    @unary_rpc
    async def GetOperation(
        self, request: operations_pb2.GetOperationRequest, context: Context
    ) -> operations_pb2.Operation:
        backend = backend_for_operation(self._instances, request.name)

        async def get() -> operations_pb2.Operation:
            return operation_of(backend.get_operation(request.name))

        return await self._bridge.call(get)

    @unary_rpc
    async def ListOperations(
        self, request: operations_pb2.ListOperationsRequest, context: Context
    ) -> operations_pb2.ListOperationsResponse:
        backend = backend_for_instance(self._instances, _instance_of_collection(request.name))

        async def page() -> operations_pb2.ListOperationsResponse:
            return list_page(backend, request)

        return await self._bridge.call(page)

    @unary_rpc
    async def CancelOperation(
        self, request: operations_pb2.CancelOperationRequest, context: Context
    ) -> empty_pb2.Empty:
        backend = backend_for_operation(self._instances, request.name)

        async def cancel() -> None:
            backend.cancel(request.name)

        await self._bridge.call(cancel)
        return empty_pb2.Empty()

    @unary_rpc
    async def DeleteOperation(
        self, request: operations_pb2.DeleteOperationRequest, context: Context
    ) -> empty_pb2.Empty:
        backend = backend_for_operation(self._instances, request.name)

        async def delete() -> None:
            backend.delete(request.name)

        await self._bridge.call(delete)
        return empty_pb2.Empty()

    @unary_rpc
    async def WaitOperation(
        self, request: operations_pb2.WaitOperationRequest, context: Context
    ) -> operations_pb2.Operation:
        backend = backend_for_operation(self._instances, request.name)
        timeout = DEFAULT_WAIT_S
        if request.HasField("timeout"):
            timeout = request.timeout.seconds + request.timeout.nanos / 1e9
            if timeout < 0:
                raise InvalidArgument(f"timeout: {timeout:g} s is negative")
        timeout = min(timeout, MAX_WAIT_S)
        return await self._bridge.call(
            functools.partial(wait_operation, backend, request.name, timeout)
        )
