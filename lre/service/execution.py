"""The REAPI ``Execution`` service: Execute and WaitExecution.

A thin adapter: the scheduler (``lre.scheduler``) does the work on the Trio
side; this module turns its ``OperationSnapshot``s into
``google.longrunning.Operation``s:

- ``metadata``: ``ExecuteOperationMetadata`` (stage, action_digest,
  digest_function) on every message;
- the final message is ``done`` with an ``ExecuteResponse`` (result,
  cached_result, message) in ``response``; an execution failure (missing
  inputs, unsatisfiable platform, timeout, cancellation, ...) goes into
  ``ExecuteResponse.status`` via ``rpc_status_of``, never into
  ``Operation.error``.

Intermediate updates are coalesced: the first message goes out at once
(the client learns the operation name), the final ``done`` one as soon as
the operation ends, and a stage in between only once it has lasted
``STAGE_SETTLE_S`` (an action that is queued, runs and finishes within that
time costs two messages, not four). Progress updates still come at least
every ``progress_interval_s``.

Errors of the request itself (malformed digest, unknown instance, unknown or
expired operation name) end the RPC with their status (NOT_FOUND for an
expired operation, so Bazel re-executes).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
import grpc.aio
import trio

from lre.errors import NotFound, Unimplemented
from lre.proto import operations_pb2, re_grpc, re_pb2
from lre.scheduler import ActionScheduler, OperationSnapshot, RequestInfo, parse_operation_name
from lre.service._bridge import TrioBridge
from lre.service._instances import Instances
from lre.service._metadata import request_metadata_from
from lre.service._status import rpc_status_of, stream_rpc

Context = grpc.aio.ServicerContext[Any, Any]

#: How long an intermediate stage must last before it is streamed. Clients
#: only display stages; every message costs the server a serialisation, a
#: thread hop and a write (about 0.25 ms of server CPU each, measured with
#: lre up and 32 Execute calls in flight), and with 20 ms a loaded machine streamed
#: all four stages of even a no-op action.
STAGE_SETTLE_S = 0.5


def operation_of(snapshot: OperationSnapshot) -> operations_pb2.Operation:
    """The ``Operation`` message of ``snapshot`` (see the module docstring)."""
    key = snapshot.action_key
    metadata = re_pb2.ExecuteOperationMetadata(
        stage=cast(Any, int(snapshot.stage)),
        action_digest=key.action_digest.to_proto(),
        digest_function=cast(Any, int(key.digest_function)),
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
            response.status.CopyFrom(rpc_status_of(snapshot.error))
        operation.response.Pack(response)
    return operation


def backend_for_instance(instances: Instances, instance_name: str) -> ActionScheduler:
    """The scheduler serving ``instance_name``.

    Raises ``InvalidArgument`` for an instance not served and
    ``Unimplemented`` when execution is disabled for it.
    """
    scheduler = instances.resolve(instance_name).scheduler
    if scheduler is None:
        raise Unimplemented(
            f"instance_name {instance_name!r}: remote execution is disabled for this instance"
        )
    return scheduler


def backend_for_operation(instances: Instances, name: str) -> ActionScheduler:
    """The scheduler that owns operation ``name``; ``NotFound`` when none can."""
    instance_name, _ = parse_operation_name(name)
    try:
        return backend_for_instance(instances, instance_name)
    except (Unimplemented, NotFound):
        raise
    except Exception:
        raise NotFound(f"operation {name!r}: no such operation") from None


def request_info_of(context: Context) -> RequestInfo:
    """The client's ``RequestMetadata`` header, as the scheduler keeps it;
    with the connection (``context.peer()``) when the request names neither
    an invocation nor a repository (the build it counts under then)."""
    info = request_metadata_from(context.invocation_metadata())
    if info.tool_invocation_id or info.repository:
        return info
    return dataclasses.replace(info, peer=context.peer() or "")


async def operation_updates(
    backend: ActionScheduler, name: str, settle_s: float = STAGE_SETTLE_S
) -> AsyncIterator[operations_pb2.Operation]:
    """(Trio) an Operation for the first state of ``name`` at once, then one
    whenever it is ``done`` or nothing newer came within ``settle_s``; ends
    after the ``done`` one. ``NotFound`` when ``name`` does not exist or has
    expired. One generator per stream (thousands may be held at once).

    A progress update of an unchanged operation comes as the same snapshot
    object (the scheduler keeps it until something changes); the Operation
    built for it is sent again rather than rebuilt."""
    async with backend.watch(name) as watch:
        updates = aiter(watch)
        snapshot = await anext(updates)
        sent_for, operation = snapshot, operation_of(snapshot)
        yield operation
        while not snapshot.done:
            snapshot = await anext(updates)
            if not snapshot.done:
                with trio.move_on_after(settle_s):
                    while not snapshot.done:
                        snapshot = await anext(updates)
            if snapshot is not sent_for:
                sent_for, operation = snapshot, operation_of(snapshot)
            yield operation


def execute_updates(
    backend: ActionScheduler, request: re_pb2.ExecuteRequest, info: RequestInfo
) -> AsyncIterator[operations_pb2.Operation]:
    """(Trio) submit ``request``; its Operations as ``operation_updates`` yields
    them. Raises what ``submit`` raises."""
    snapshot = backend.submit(request, request_info=info)
    return operation_updates(backend, snapshot.name)


def wait_updates(backend: ActionScheduler, name: str) -> AsyncIterator[operations_pb2.Operation]:
    """(Trio) the Operations of ``name`` as ``operation_updates`` yields them."""
    return operation_updates(backend, name)


class ExecutionServicer:
    """``build.bazel.remote.execution.v2.Execution`` over the instances' schedulers."""

    def __init__(self, bridge: TrioBridge, instances: Instances) -> None:
        self._bridge = bridge
        self._instances = instances

    def register(self, server: grpc.aio.Server) -> None:
        re_grpc.add_ExecutionServicer_to_server(self, server)

    # Plain functions returning the bridge's stream: one async generator less
    # per held stream (stream_rpc iterates what they return).

    @stream_rpc
    def Execute(
        self, request: re_pb2.ExecuteRequest, context: Context
    ) -> AsyncIterator[operations_pb2.Operation]:
        backend = backend_for_instance(self._instances, request.instance_name)
        produce = functools.partial(execute_updates, backend, request, request_info_of(context))
        return self._bridge.stream(produce, buffer=8)

    @stream_rpc
    def WaitExecution(
        self, request: re_pb2.WaitExecutionRequest, context: Context
    ) -> AsyncIterator[operations_pb2.Operation]:
        backend = backend_for_operation(self._instances, request.name)
        produce = functools.partial(wait_updates, backend, request.name)
        return self._bridge.stream(produce, buffer=8)
