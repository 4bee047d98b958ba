"""The Execution protocol end to end: what a client sees for bad inputs, missing
blobs, unmatchable platforms, stages, the action cache, dedup and re-attaching.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from lre.proto import operations_pb2, re_pb2
from tests._support.processes import processes_with, wait_until
from tests._support.reapi import (
    Client,
    Stage,
    digest,
    metadata_of,
    precondition_failure,
    response_of,
    stages,
    subject,
)

OK = grpc.StatusCode.OK.value[0]
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
FAILED_PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION.value[0]


def in_threads(*calls: Callable[[], Any]) -> list[Any]:
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
        return [future.result(timeout=60) for future in futures]


# ------------------------------------------------------------------ bad inputs


def files_named(*names: str) -> re_pb2.Directory:
    return re_pb2.Directory(files=[re_pb2.FileNode(name=n, digest=digest(b"x")) for n in names])


BAD_DIRECTORIES = {
    "dot-dot file": (files_named("..", "a"), "'..'"),
    "slash": (files_named("a/b"), "'a/b'"),
    "duplicate": (files_named("a", "a"), "'a' appears more than once"),
    "unsorted": (files_named("b", "a"), "not sorted"),
    "dot-dot directory": (
        re_pb2.Directory(
            directories=[re_pb2.DirectoryNode(name="..", digest=digest(b""))],
        ),
        "'..'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_DIRECTORIES))
def test_bad_input_names_are_invalid_argument_naming_the_directory(
    client: Client, case: str
) -> None:
    bad, text = BAD_DIRECTORIES[case]
    bad_bytes = bad.SerializeToString()
    # The bad Directory is nested one level down, so the message must name it
    # and not the input root.
    root = re_pb2.Directory(
        directories=[re_pb2.DirectoryNode(name="pkg", digest=digest(bad_bytes))]
    )
    root_bytes = root.SerializeToString()
    client.upload([b"x", b"", bad_bytes, root_bytes])
    operations = client.execute(client.prepare(["true"], input_root=digest(root_bytes)))
    # lre answers in ExecuteResponse.status (the RPC itself succeeds).
    response = response_of(operations[-1])
    assert response.status.code == INVALID_ARGUMENT, response.status
    bad_digest = digest(bad_bytes)
    assert f"{bad_digest.hash}/{bad_digest.size_bytes}" in response.status.message
    assert text in response.status.message
    assert not response.HasField("result") or response.result.exit_code == 0
    assert processes_with(bad_digest.hash) == []


def test_missing_inputs_are_failed_precondition_with_exact_subjects(client: Client) -> None:
    inputs = {"src/a.c": b"missing one", "src/b/c.h": b"missing two", "present": b"here"}
    prepared = client.prepare(["cat", "src/a.c", "src/b/c.h"], inputs=inputs, upload=False)
    contents = {b"missing one", b"missing two"}
    # Upload everything except two file contents (Directories, Command, Action, "here").
    client.upload([blob for blob in prepared.blobs.values() if blob not in contents])
    started = time.monotonic()
    operations = client.execute(prepared)
    assert time.monotonic() - started < 10
    response = response_of(operations[-1])
    assert response.status.code == FAILED_PRECONDITION, response.status
    failure = precondition_failure(response.status)
    assert sorted((v.type, v.subject) for v in failure.violations) == sorted(
        ("MISSING", subject(digest(blob))) for blob in contents
    )
    assert Stage.EXECUTING not in stages(operations)

    # What Bazel does next: upload what was missing and Execute again.
    client.upload(contents)
    response = response_of(client.execute(prepared)[-1])
    assert (response.status.code, response.result.exit_code) == (OK, 0)
    assert client.stdout(response.result) == b"missing onemissing two"


def test_missing_command_is_named(client: Client) -> None:
    prepared = client.prepare(["echo", "never uploaded"], upload=False)
    action_bytes = prepared.blobs[prepared.digest]
    client.upload([b for d, b in prepared.blobs.items() if d != prepared.command_digest])
    response = response_of(client.execute(prepared)[-1])
    assert response.status.code == FAILED_PRECONDITION
    failure = precondition_failure(response.status)
    assert [(v.type, v.subject) for v in failure.violations] == [
        ("MISSING", subject(prepared.action.command_digest))
    ]
    assert digest(action_bytes) == prepared.action_digest


def test_missing_action_is_named(client: Client) -> None:
    prepared = client.prepare(["true"], upload=False)
    client.upload([b for d, b in prepared.blobs.items() if d != prepared.digest])
    response = response_of(client.execute(prepared)[-1])
    assert response.status.code == FAILED_PRECONDITION
    failure = precondition_failure(response.status)
    assert [(v.type, v.subject) for v in failure.violations] == [
        ("MISSING", subject(prepared.action_digest))
    ]


@pytest.mark.parametrize(
    ("where", "properties", "named"),
    [
        ("command", {"cpu_count": "64"}, ["cpu_count", "64"]),
        ("action", {"gpu_model": "h100"}, ["gpu_model", "h100"]),
        ("command", {"OSFamily": "windows"}, ["OSFamily", "windows"]),
    ],
)
def test_unmatchable_action_fails_at_once(
    client: Client, where: str, properties: dict[str, str], named: list[str]
) -> None:
    if where == "action":
        prepared = client.prepare(["true"], action_platform=properties)
    else:
        prepared = client.prepare(["true"], command_platform=properties)
    started = time.monotonic()
    operations = client.execute(prepared)
    assert time.monotonic() - started < 5
    response = response_of(operations[-1])
    assert response.status.code == FAILED_PRECONDITION, response.status
    for word in named:
        assert word in response.status.message
    assert stages(operations) == [Stage.CACHE_CHECK, Stage.COMPLETED]


# ------------------------------------------------------------------ stages and cache


def test_stage_sequence_when_the_action_has_to_wait(client: Client, marker: str) -> None:
    # Both of the worker's slots (max_inflight_tasks=2) are busy for a moment,
    # so the third action is visibly QUEUED before it runs.
    blockers = [
        client.prepare(["/bin/sh", "-c", f"sleep 6; : {marker}"], do_not_cache=True)
        for _ in range(2)
    ]
    # Updates carry the latest state, so the waiting action runs long enough
    # for its EXECUTING state to be seen.
    waiting = client.prepare(["/bin/sh", "-c", "sleep 0.5; echo after the blockers"])

    def third() -> list[operations_pb2.Operation]:
        # Long enough that a busy machine starting the second blocker late
        # still finds the first one running.
        assert wait_until(lambda: len(processes_with(marker)) == 2, seconds=30)
        return client.execute(waiting)

    first, second, operations = in_threads(
        lambda: client.execute(blockers[0]), lambda: client.execute(blockers[1]), third
    )
    assert stages(operations) == [
        Stage.CACHE_CHECK,
        Stage.QUEUED,
        Stage.EXECUTING,
        Stage.COMPLETED,
    ]
    for operation in operations:
        metadata = metadata_of(operation)
        assert metadata.action_digest == waiting.action_digest
        assert operation.name == operations[0].name
    assert operations[0].name.startswith("main/operations/")
    assert [op.done for op in operations] == [False] * (len(operations) - 1) + [True]
    response = response_of(operations[-1])
    assert client.stdout(response.result) == b"after the blockers\n"
    for blocker in (first, second):
        assert response_of(blocker[-1]).result.exit_code == 0


def test_stages_are_in_order_and_lasting_ones_are_seen(client: Client) -> None:
    # A stage is streamed once it lasted a moment (20 ms): a quick action may
    # go from CACHE_CHECK straight to COMPLETED, never out of order.
    quick = stages(client.execute(client.prepare(["true"])))
    assert quick[0] == Stage.CACHE_CHECK and quick[-1] == Stage.COMPLETED
    assert quick == sorted(quick)
    slow = stages(client.execute(client.prepare(["sleep", "0.5"])))
    assert slow in (
        [Stage.CACHE_CHECK, Stage.EXECUTING, Stage.COMPLETED],
        [Stage.CACHE_CHECK, Stage.QUEUED, Stage.EXECUTING, Stage.COMPLETED],
    )


def writable(directory: Path) -> dict[str, str]:
    """The platform that shows ``directory`` writable in the action's view
    (the test counts runs there; every other host path is read-only)."""
    return {"sandbox-writable-path": str(directory)}


def test_second_execute_is_a_cache_hit(client: Client, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    prepared = client.prepare(
        ["/bin/sh", "-c", f"echo ran >> {runs}; echo cached output"],
        action_platform=writable(tmp_path),
    )
    first = response_of(client.execute(prepared)[-1])
    assert not first.cached_result and first.result.exit_code == 0

    operations = client.execute(prepared)
    second = response_of(operations[-1])
    assert second.cached_result
    assert stages(operations) == [Stage.CACHE_CHECK, Stage.COMPLETED]
    assert second.result == first.result
    assert client.stdout(second.result) == b"cached output\n"
    assert runs.read_text() == "ran\n"

    # skip_cache_lookup runs it again.
    third = response_of(client.execute(prepared, skip_cache_lookup=True)[-1])
    assert not third.cached_result
    assert runs.read_text() == "ran\nran\n"


@pytest.mark.parametrize("kind", ["failure", "do_not_cache"])
def test_uncacheable_results_run_again(client: Client, tmp_path: Path, kind: str) -> None:
    runs = tmp_path / "runs"
    script = f"echo ran >> {runs}" + ("; exit 1" if kind == "failure" else "")
    prepared = client.prepare(
        ["/bin/sh", "-c", script],
        do_not_cache=kind == "do_not_cache",
        action_platform=writable(tmp_path),
    )
    for _ in range(2):
        response = response_of(client.execute(prepared)[-1])
        assert not response.cached_result
    assert runs.read_text() == "ran\nran\n"
    with pytest.raises(grpc.RpcError) as raised:
        client.action_cache.GetActionResult(
            re_pb2.GetActionResultRequest(
                instance_name=client.instance, action_digest=prepared.action_digest
            ),
            timeout=10,
        )
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


def test_concurrent_identical_executes_run_once(client: Client, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    prepared = client.prepare(
        ["/bin/sh", "-c", f"echo ran >> {runs}; sleep 2; echo shared"],
        action_platform=writable(tmp_path),
    )
    streams = in_threads(lambda: client.execute(prepared), lambda: client.execute(prepared))
    first, second = (response_of(ops[-1]) for ops in streams)
    assert runs.read_text() == "ran\n"
    assert first.result == second.result
    assert first.result.exit_code == 0
    assert client.stdout(first.result) == b"shared\n"
    # The second caller attached to the first one's operation.
    assert streams[0][-1].name == streams[1][-1].name


# ------------------------------------------------------------------ re-attaching


def wait_execution(client: Client, name: str) -> list[operations_pb2.Operation]:
    return list(client.execution.WaitExecution(re_pb2.WaitExecutionRequest(name=name), timeout=60))


def test_wait_execution_after_the_stream_completed(client: Client) -> None:
    operations = client.execute(client.prepare(["echo", "finished"]))
    name = operations[-1].name
    again = wait_execution(client, name)
    assert again[-1].done and again[-1].name == name
    assert response_of(again[-1]) == response_of(operations[-1])


def test_wait_execution_keeps_an_action_whose_stream_closed(client: Client, marker: str) -> None:
    call = client.execution.Execute(
        client.execute_request(
            client.prepare(["/bin/sh", "-c", f"sleep 1; : {marker}; echo survived"])
        ),
        timeout=60,
    )
    name = next(iter(call)).name
    waiter = client.execution.WaitExecution(re_pb2.WaitExecutionRequest(name=name), timeout=60)
    first = next(iter(waiter))  # attached before the Execute stream goes away
    assert first.name == name
    call.cancel()
    rest = list(waiter)
    response = response_of(rest[-1])
    assert (response.status.code, response.result.exit_code) == (OK, 0), response.status
    assert client.stdout(response.result) == b"survived\n"


def test_wait_execution_of_an_unknown_operation_is_not_found(client: Client) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        wait_execution(client, "main/operations/00000000-0000-0000-0000-000000000000")
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


# ------------------------------------------------------------------ action cache


def test_update_then_get_action_result(client: Client) -> None:
    prepared = client.prepare(["cc", "-c", "never-run.c"])
    output = b"object bytes written by the client"
    client.upload([output])
    result = re_pb2.ActionResult(
        output_files=[re_pb2.OutputFile(path="out/x.o", digest=digest(output))],
        exit_code=0,
        stdout_raw=b"",
        execution_metadata=re_pb2.ExecutedActionMetadata(worker="client-side"),
    )
    stored = client.action_cache.UpdateActionResult(
        re_pb2.UpdateActionResultRequest(
            instance_name=client.instance,
            action_digest=prepared.action_digest,
            action_result=result,
        ),
        timeout=10,
    )
    assert stored.HasField("execution_metadata")
    assert list(stored.output_files) == list(result.output_files)
    got = client.action_cache.GetActionResult(
        re_pb2.GetActionResultRequest(
            instance_name=client.instance, action_digest=prepared.action_digest
        ),
        timeout=10,
    )
    assert got == stored
    assert got.execution_metadata.worker == "client-side"
    # And Execute answers from it.
    response = response_of(client.execute(prepared)[-1])
    assert response.cached_result and response.result == got


def test_update_without_metadata_is_answered_with_metadata(client: Client) -> None:
    prepared = client.prepare(["never", "run"])
    stored = client.action_cache.UpdateActionResult(
        re_pb2.UpdateActionResultRequest(
            instance_name=client.instance,
            action_digest=prepared.action_digest,
            action_result=re_pb2.ActionResult(exit_code=0),
        ),
        timeout=10,
    )
    # Buck2 fails on any ActionResult without execution_metadata, replies included.
    assert stored.HasField("execution_metadata")
    got = client.action_cache.GetActionResult(
        re_pb2.GetActionResultRequest(
            instance_name=client.instance, action_digest=prepared.action_digest
        ),
        timeout=10,
    )
    assert got.HasField("execution_metadata")
    response = response_of(client.execute(prepared)[-1])
    assert response.cached_result and response.result.HasField("execution_metadata")


def test_executed_results_are_in_the_action_cache(client: Client) -> None:
    prepared = client.prepare(["echo", "stored"])
    response = response_of(client.execute(prepared)[-1])
    got = client.action_cache.GetActionResult(
        re_pb2.GetActionResultRequest(
            instance_name=client.instance, action_digest=prepared.action_digest
        ),
        timeout=10,
    )
    assert got == response.result
    assert got.execution_metadata.worker == "local"
    metadata = got.execution_metadata
    times = [
        metadata.queued_timestamp.ToNanoseconds(),
        metadata.worker_start_timestamp.ToNanoseconds(),
        metadata.execution_start_timestamp.ToNanoseconds(),
        metadata.execution_completed_timestamp.ToNanoseconds(),
        metadata.worker_completed_timestamp.ToNanoseconds(),
    ]
    assert times == sorted(times) and times[0] > 0
