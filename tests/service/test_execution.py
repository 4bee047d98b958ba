"""Execution and Operations services over a real server on 127.0.0.1, with the
real scheduler and a fake in-process worker the tests drive."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import trio
from google.longrunning import operations_pb2_grpc
from google.protobuf import duration_pb2

from lre.cas import ActionResultCache, MemoryActionCache
from lre.digest import Digest, digest_of
from lre.proto import error_details_pb2, operations_pb2, re_grpc, re_pb2
from lre.scheduler import Scheduler, Stage
from lre.service import InstanceBackends, Instances
from lre.service.execution import STAGE_SETTLE_S, ExecutionServicer
from lre.service.operations import OperationsServicer
from tests._support.reapi import open_channel
from tests._support.scheduler import (
    ActionBuilder,
    FakeWorker,
    Harness,
    execute_request,
    start_harness,
    worker_info,
)
from tests._support.servers import start_server


@dataclass
class ExecServer:
    harness: Harness
    worker: FakeWorker
    channel: grpc.Channel
    execution: Any
    operations: Any
    action_cache: Any

    @property
    def scheduler(self) -> Scheduler:
        return self.harness.scheduler

    @property
    def builder(self) -> ActionBuilder:
        return self.harness.builder

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))

    async def execute_all(self, request: re_pb2.ExecuteRequest) -> list[operations_pb2.Operation]:
        return await trio.to_thread.run_sync(lambda: list(self.execution.Execute(request)))


async def start_exec_server(nursery: trio.Nursery, **kwargs: Any) -> ExecServer:
    harness = await start_harness(nursery, **kwargs)
    results = ActionResultCache(MemoryActionCache(), harness.cas)
    # The scheduler reads the same action cache the ActionCache service writes.
    harness.scheduler._action_cache = results
    backends = {
        "main": InstanceBackends(
            cas=harness.cas, action_cache=results, scheduler=harness.scheduler
        ),
        "a/operations/b": InstanceBackends(cas=harness.cas, scheduler=harness.scheduler),
        "cache-only": InstanceBackends(cas=harness.cas, action_cache=results),
    }
    instances = Instances(backends)
    address, _, _ = await start_server(
        nursery,
        backends,
        extra=lambda bridge: [
            ExecutionServicer(bridge, instances),
            OperationsServicer(bridge, instances),
        ],
    )
    worker = await harness.add_worker(worker_info())
    channel = open_channel(address)
    return ExecServer(
        harness,
        worker,
        channel,
        re_grpc.ExecutionStub(channel),
        operations_pb2_grpc.OperationsStub(channel),
        re_grpc.ActionCacheStub(channel),
    )


@pytest.fixture
async def server(nursery: trio.Nursery) -> AsyncIterator[ExecServer]:
    handle = await start_exec_server(nursery)
    try:
        yield handle
    finally:
        handle.channel.close()


def metadata_of(operation: operations_pb2.Operation) -> re_pb2.ExecuteOperationMetadata:
    metadata = re_pb2.ExecuteOperationMetadata()
    assert operation.metadata.Unpack(metadata)
    return metadata


def response_of(operation: operations_pb2.Operation) -> re_pb2.ExecuteResponse:
    assert operation.done
    assert operation.WhichOneof("result") == "response"  # never Operation.error
    response = re_pb2.ExecuteResponse()
    assert operation.response.Unpack(response)
    return response


async def complete_next(server: ExecServer, exit_code: int = 0, *, hold: float = 0.05) -> None:
    lease = await server.worker.next_lease()
    await server.harness.wait_stage(lease.operation_name, Stage.EXECUTING)
    await trio.sleep(hold)
    server.worker.complete(lease, exit_code)


async def test_execute_streams_stages_then_done_response(server: ExecServer) -> None:
    digest = await server.builder.action("/bin/cc", "-c", "x.c")
    ops: list[operations_pb2.Operation] = []
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            ops.extend(await server.execute_all(execute_request(digest)))

        nursery.start_soon(run)
        # Executing for longer than the settle time, so the stage is streamed.
        await complete_next(server, exit_code=7, hold=STAGE_SETTLE_S + 0.1)
    stages = [metadata_of(op).stage for op in ops]
    assert stages[0] == re_pb2.ExecutionStage.CACHE_CHECK
    assert stages[-1] == re_pb2.ExecutionStage.COMPLETED
    assert re_pb2.ExecutionStage.EXECUTING in stages
    assert stages == sorted(stages)
    assert len({op.name for op in ops}) == 1 and ops[0].name.startswith("main/operations/")
    meta = metadata_of(ops[-1])
    assert Digest.from_proto(meta.action_digest) == digest
    assert meta.digest_function == re_pb2.DigestFunction.SHA256
    assert all(not op.done for op in ops[:-1])
    response = response_of(ops[-1])
    assert response.status.code == 0 and response.result.exit_code == 7
    assert not response.cached_result


async def test_missing_inputs_give_precondition_failure_in_response(server: ExecServer) -> None:
    lost = digest_of(b"lost")
    digest = await server.builder.action(files={"a.c": b"lost"}, upload=False)
    ops = await server.execute_all(execute_request(digest))
    response = response_of(ops[-1])
    assert response.status.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    failure = error_details_pb2.PreconditionFailure()
    assert response.status.details[0].Unpack(failure)
    assert [(v.type, v.subject) for v in failure.violations] == [
        ("MISSING", f"blobs/{lost.hash}/{lost.size_bytes}")
    ]


async def test_unsatisfiable_action_fails_at_once(server: ExecServer) -> None:
    digest = await server.builder.action(platform={"cpu_count": "64"})
    with trio.fail_after(5):
        ops = await server.execute_all(execute_request(digest))
    response = response_of(ops[-1])
    assert response.status.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert "cpu_count=64" in response.status.message
    assert "largest worker: cpu_count=4" in response.status.message


async def test_cached_result_is_served_without_running(server: ExecServer) -> None:
    digest = await server.builder.action("/bin/cached")
    result = re_pb2.ActionResult(exit_code=0)
    result.execution_metadata.worker = "elsewhere"
    await server.call(
        server.action_cache.UpdateActionResult,
        re_pb2.UpdateActionResultRequest(
            instance_name="main", action_digest=digest.to_proto(), action_result=result
        ),
    )
    ops = await server.execute_all(execute_request(digest))
    response = response_of(ops[-1])
    assert response.cached_result and response.result.execution_metadata.worker == "elsewhere"
    assert server.worker.no_lease_pending()


async def test_two_clients_share_one_run(server: ExecServer) -> None:
    digest = await server.builder.action("/bin/shared")
    results: list[list[operations_pb2.Operation]] = []
    attached = [trio.Event(), trio.Event()]
    async with trio.open_nursery() as nursery:

        async def run(first_reply: trio.Event) -> None:
            def stream() -> list[operations_pb2.Operation]:
                ops = []
                for op in server.execution.Execute(execute_request(digest)):
                    ops.append(op)
                    trio.from_thread.run_sync(first_reply.set)
                return ops

            results.append(await trio.to_thread.run_sync(stream))

        for event in attached:
            nursery.start_soon(run, event)
        # Both calls hold the operation before it ends (on a busy machine the
        # second call could otherwise arrive after the first run completed).
        for event in attached:
            await event.wait()
        await complete_next(server, exit_code=0)
    assert len(results) == 2
    assert results[0][-1].name == results[1][-1].name
    assert response_of(results[0][-1]) == response_of(results[1][-1])
    assert server.worker.no_lease_pending()


async def test_client_gone_cancels_and_wait_execution_reattaches(nursery: trio.Nursery) -> None:
    server = await start_exec_server(nursery, detach_grace_s=1.0)
    try:
        digest = await server.builder.action("/bin/sleep", "1000")
        first: list[operations_pb2.Operation] = []

        def read_until_executing() -> None:
            call = server.execution.Execute(execute_request(digest))
            for op in call:
                first.append(op)
                if metadata_of(op).stage == re_pb2.ExecutionStage.EXECUTING:
                    call.cancel()
                    return

        await trio.to_thread.run_sync(read_until_executing)
        lease = await server.worker.next_lease()
        name = first[-1].name
        # Re-attach within the grace (what Bazel does when its stream breaks).
        wait = server.execution.WaitExecution(re_pb2.WaitExecutionRequest(name=name))
        got = await trio.to_thread.run_sync(next, wait)
        assert got.name == name and not got.done
        await trio.sleep(1.5)
        assert not lease.cancelled
        server.worker.complete(lease, exit_code=0)
        rest = await trio.to_thread.run_sync(lambda: list(wait))
        assert response_of(rest[-1]).result.exit_code == 0

        # Now leave for good: the lease is cancelled after the grace.
        digest = await server.builder.action("/bin/sleep", "2000")
        await trio.to_thread.run_sync(read_until_executing)
        lease = await server.worker.next_lease()
        with trio.fail_after(5):
            await lease.wait_cancelled()
        snapshot = server.scheduler.get_operation(lease.operation_name)
        assert snapshot.done and snapshot.error is not None
    finally:
        server.channel.close()


async def test_wait_execution_unknown_and_expired_give_not_found(nursery: trio.Nursery) -> None:
    server = await start_exec_server(nursery, retain=0.3)
    try:
        digest = await server.builder.action()
        async with trio.open_nursery() as inner:
            ops: list[operations_pb2.Operation] = []

            async def run() -> None:
                ops.extend(await server.execute_all(execute_request(digest)))

            inner.start_soon(run)
            await complete_next(server)
        name = ops[-1].name
        again = await server.call(
            lambda: list(server.execution.WaitExecution(re_pb2.WaitExecutionRequest(name=name)))
        )
        assert again[-1].done
        await trio.sleep(1.2)  # retention 0.3 s, swept every 0.5 s
        for missing in (name, "main/operations/not-a-uuid"):
            with pytest.raises(grpc.RpcError) as info:
                await server.call(
                    lambda n=missing: list(
                        server.execution.WaitExecution(re_pb2.WaitExecutionRequest(name=n))
                    )
                )
            assert info.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        server.channel.close()


async def test_execute_without_scheduler_is_unimplemented(server: ExecServer) -> None:
    digest = await server.builder.action()
    with pytest.raises(grpc.RpcError) as info:
        await server.execute_all(execute_request(digest, instance="cache-only"))
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(grpc.RpcError) as info:
        await server.execute_all(execute_request(digest, instance="nobody"))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_operations_service(server: ExecServer) -> None:
    digest = await server.builder.action("/bin/sleep", "5")
    snapshot = server.scheduler.submit(execute_request(digest, instance="a/operations/b"))
    lease = await server.worker.next_lease()
    name = snapshot.name
    got = await server.call(
        server.operations.GetOperation, operations_pb2.GetOperationRequest(name=name)
    )
    assert got.name == name and metadata_of(got).stage == re_pb2.ExecutionStage.EXECUTING
    listed = await server.call(
        server.operations.ListOperations,
        operations_pb2.ListOperationsRequest(name="a/operations/b", page_size=10),
    )
    assert [op.name for op in listed.operations] == [name]
    waited = await server.call(
        server.operations.WaitOperation,
        operations_pb2.WaitOperationRequest(name=name, timeout=duration_pb2.Duration(nanos=10**8)),
    )
    assert not waited.done
    await server.call(
        server.operations.CancelOperation, operations_pb2.CancelOperationRequest(name=name)
    )
    assert lease.cancelled
    got = await server.call(
        server.operations.GetOperation, operations_pb2.GetOperationRequest(name=name)
    )
    assert response_of(got).status.code == grpc.StatusCode.CANCELLED.value[0]
    await server.call(
        server.operations.DeleteOperation, operations_pb2.DeleteOperationRequest(name=name)
    )
    with pytest.raises(grpc.RpcError) as info:
        await server.call(
            server.operations.GetOperation, operations_pb2.GetOperationRequest(name=name)
        )
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as info:
        await server.call(
            server.operations.ListOperations,
            operations_pb2.ListOperationsRequest(name="main", filter="stage=QUEUED"),
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "filter" in (info.value.details() or "")


async def test_list_operations_pages(server: ExecServer) -> None:
    names = []
    for _ in range(5):
        digest = await server.builder.action()
        names.append(server.scheduler.submit(execute_request(digest)).name)
    seen: list[str] = []
    token = ""
    while True:
        page = await server.call(
            server.operations.ListOperations,
            operations_pb2.ListOperationsRequest(name="main", page_size=2, page_token=token),
        )
        seen += [op.name for op in page.operations]
        token = page.next_page_token
        if not token:
            break
    assert seen == names
