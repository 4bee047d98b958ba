"""What happens before an action queues: inputs, platform, timeouts."""

from __future__ import annotations

import pytest
import trio

from lre.cas import write_bytes, write_message
from lre.digest import digest_of
from lre.errors import FailedPrecondition, InvalidArgument, MissingBlobs
from lre.proto import re_pb2
from lre.scheduler import Stage, parse_operation_name
from tests._support.scheduler import Harness, execute_request, worker_info


async def final_of(harness: Harness, name: str):  # type: ignore[no-untyped-def]
    return await harness.wait_stage(name, Stage.COMPLETED)


async def test_missing_inputs_name_every_missing_blob(harness: Harness) -> None:
    await harness.add_worker()
    cas = harness.cas
    present = await write_bytes(cas, b"present")
    lost_file = digest_of(b"never uploaded")
    lost_nested = digest_of(b"nested, never uploaded")
    sub = re_pb2.Directory()
    sub.files.add(name="n.c", digest=lost_nested.to_proto())
    sub_digest = await write_message(cas, sub)
    lost_dir = re_pb2.Directory()
    lost_dir.files.add(name="x", digest=present.to_proto())
    lost_dir_digest = digest_of(lost_dir.SerializeToString(deterministic=True))
    root = re_pb2.Directory()
    root.files.add(name="a.c", digest=lost_file.to_proto())
    root.files.add(name="b.c", digest=present.to_proto())
    root.directories.add(name="gone", digest=lost_dir_digest.to_proto())
    root.directories.add(name="sub", digest=sub_digest.to_proto())
    root_digest = await write_message(cas, root)
    command = re_pb2.Command(arguments=["/bin/cc"])
    command_digest = digest_of(command.SerializeToString(deterministic=True))  # not uploaded
    action = re_pb2.Action(
        command_digest=command_digest.to_proto(), input_root_digest=root_digest.to_proto()
    )
    action_digest = await write_message(cas, action)
    op = harness.scheduler.submit(execute_request(action_digest))
    final = await final_of(harness, op.name)
    assert isinstance(final.error, MissingBlobs)
    assert final.error.subjects == (
        command_digest.subject,
        lost_file.subject,
        lost_dir_digest.subject,
        lost_nested.subject,
    )
    assert all(s.startswith("blobs/") for s in final.error.subjects)


async def test_missing_action_blob(harness: Harness) -> None:
    ghost = digest_of(b"no such action")
    op = harness.scheduler.submit(execute_request(ghost))
    final = await final_of(harness, op.name)
    assert isinstance(final.error, MissingBlobs)
    assert final.error.subjects == (f"blobs/{ghost.hash}/{ghost.size_bytes}",)


@pytest.mark.parametrize(
    ("platform", "expected"),
    [
        (
            {"cpu_count": "64"},
            "cpu_count=64: more CPUs than any worker has (largest worker: cpu_count=4)",
        ),
        (
            {"OSFamily": "windows"},
            "OSFamily='windows': no worker offers it (workers offer OSFamily = 'linux')",
        ),
        ({"container-image": "docker://x"}, "container-image='docker://x' is not known"),
        ({"memory_kb": str(64 << 20)}, "memory_kb=67108864: more memory than any worker has"),
    ],
)
async def test_unsatisfiable_action_fails_at_once_naming_key_value_and_offer(
    harness: Harness, platform: dict[str, str], expected: str
) -> None:
    await harness.add_worker()
    digest = await harness.builder.action(platform=platform)
    op = harness.scheduler.submit(execute_request(digest))
    with trio.fail_after(1):
        final = await final_of(harness, op.name)
    assert isinstance(final.error, FailedPrecondition)
    assert expected in final.error.message


async def test_command_platform_is_used_when_action_has_none(harness: Harness) -> None:
    worker = await harness.add_worker()
    digest = await harness.builder.action(command_platform={"cpu_count": "3", "OSFamily": "linux"})
    harness.scheduler.submit(execute_request(digest))
    lease = await worker.next_lease()
    assert dict(lease.platform) == {"cpu_count": "3", "OSFamily": "linux"}
    assert lease.reservation.millicpus == 3000
    worker.complete(lease)
    # Action.platform wins over Command.platform when it is set.
    digest = await harness.builder.action(
        platform={"cpu_count": "2"}, command_platform={"cpu_count": "3"}
    )
    harness.scheduler.submit(execute_request(digest))
    lease = await worker.next_lease()
    assert lease.reservation.millicpus == 2000


async def test_timeouts_rejected_above_the_maximum_default_when_unset(harness: Harness) -> None:
    worker = await harness.add_worker(worker_info(max_timeout=600, default_timeout=30))
    too_long = await harness.builder.action(timeout_s=601)
    op = harness.scheduler.submit(execute_request(too_long))
    final = await final_of(harness, op.name)
    assert isinstance(final.error, InvalidArgument)
    assert "601 s is longer than the maximum 600 s" in final.error.message
    harness.scheduler.submit(execute_request(await harness.builder.action(timeout_s=600)))
    assert (await worker.next_lease()).timeout_s == 600
    harness.scheduler.submit(execute_request(await harness.builder.action()))
    assert (await worker.next_lease()).timeout_s == 30


async def test_malformed_request_is_rejected_by_submit(harness: Harness) -> None:
    request = re_pb2.ExecuteRequest(instance_name="main")
    request.action_digest.hash = "nothex"
    with pytest.raises(InvalidArgument, match=r"action_digest\.hash"):
        harness.scheduler.submit(request)


def test_operation_name_parsing() -> None:
    uid = "0b9e2a8c-5d9f-4a47-9d1c-6c1d2f9e8a11"
    assert parse_operation_name(f"operations/{uid}") == ("", uid)
    assert parse_operation_name(f"a/b/operations/{uid}") == ("a/b", uid)
    assert parse_operation_name(f"x/operations/y/operations/{uid}") == ("x/operations/y", uid)
    for bad in ("", uid, f"ops/{uid}", "main/operations/not-a-uuid", f"/operations/{uid}"):
        with pytest.raises(Exception, match="no such operation"):
            parse_operation_name(bad)
