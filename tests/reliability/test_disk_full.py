"""Disk full: the CAS on a small tmpfs. Uploads fail RESOURCE_EXHAUSTED, reads
keep working, nothing partial or corrupt is left, and uploads work again once
space returns. With the free-disk floor (``eviction_policy.min_free_disk``)
uploads stop at the floor instead, naming it, and the disk keeps that room
for lre's own state.

Mounting needs root (CAP_SYS_ADMIN). Without it the test is skipped, except
under CI=true, where it fails.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import trio

from lre.app import Application
from lre.config import HITS_FILE
from lre.digest import Digest
from lre.proto import bs_grpc, bs_pb2, re_grpc, re_pb2
from tests._support.actions import as_digest
from tests._support.configs import app_config_text, config_of
from tests._support.reapi import Client, digest, open_channel, response_of
from tests.reliability._crash import stray_files

SIZE_MIB = 24


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    tool = shutil.which("mount")
    proc = (
        subprocess.run(
            [tool, "-t", "tmpfs", "-o", f"size={SIZE_MIB}m,mode=0700", "tmpfs", str(mount_point)],
            capture_output=True,
            text=True,
        )
        if tool is not None
        else None
    )
    if proc is None or proc.returncode != 0:
        why = proc.stderr.strip() if proc is not None else "no mount command"
        pytest.skip(f"cannot mount a tmpfs (needs root): {why}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False, capture_output=True)


def write(bytestream: bs_grpc.ByteStreamStub, data: bytes) -> tuple[grpc.StatusCode, str]:
    d = digest(data)
    name = f"main/uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}"
    pieces = [data[i : i + (256 << 10)] for i in range(0, len(data), 256 << 10)]
    requests = (
        bs_pb2.WriteRequest(
            resource_name=name if i == 0 else "",
            write_offset=i * (256 << 10),
            data=piece,
            finish_write=i == len(pieces) - 1,
        )
        for i, piece in enumerate(pieces)
    )
    try:
        bytestream.Write(requests, timeout=30)
    except grpc.RpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


def read(bytestream: bs_grpc.ByteStreamStub, data: bytes) -> bytes:
    d = digest(data)
    request = bs_pb2.ReadRequest(resource_name=f"main/blobs/{d.hash}/{d.size_bytes}")
    return b"".join(r.data for r in bytestream.Read(request, timeout=30))


def scenario(address: str, disk: Path) -> dict[str, object]:
    """Blocking client part (runs in a thread while the app serves in Trio)."""
    outcome: dict[str, object] = {}
    with open_channel(address) as ch:
        bytestream = bs_grpc.ByteStreamStub(ch)
        cas = re_grpc.ContentAddressableStorageStub(ch)
        early = [os.urandom(100_000) for _ in range(5)]
        for blob in early:
            assert write(bytestream, blob) == (grpc.StatusCode.OK, "")
        ballast = disk / "ballast"
        ballast.write_bytes(b"\0" * (6 << 20))
        # Fill the disk with 1 MiB blobs until the store says it is full.
        failure: tuple[grpc.StatusCode, str] | None = None
        for _ in range(4 * SIZE_MIB):
            code, message = write(bytestream, os.urandom(1 << 20))
            if code != grpc.StatusCode.OK:
                failure = (code, message)
                break
        outcome["bytestream_failure"] = failure
        blob = os.urandom(1_500_000)  # more than the failed 1 MiB upload could leave
        response = cas.BatchUpdateBlobs(
            re_pb2.BatchUpdateBlobsRequest(
                instance_name="main",
                requests=[re_pb2.BatchUpdateBlobsRequest.Request(digest=digest(blob), data=blob)],
            ),
            timeout=30,
        )
        outcome["batch_status"] = response.responses[0].status
        outcome["reads_while_full"] = [read(bytestream, b) == b for b in early]
        missing = cas.FindMissingBlobs(
            re_pb2.FindMissingBlobsRequest(instance_name="main", blob_digests=[digest(blob)]),
            timeout=30,
        )
        outcome["failed_blob_missing"] = len(missing.missing_blob_digests) == 1
        leftovers = [p.name for p in (disk / "tmp" / "cas").iterdir()]
        outcome["temp_leftovers"] = leftovers
        ballast.unlink()
        again = os.urandom(2 << 20)
        outcome["after_space_returns"] = write(bytestream, again)
        outcome["read_after"] = read(bytestream, again) == again
    return outcome


async def test_full_disk_refuses_uploads_and_keeps_serving(small_disk: Path) -> None:
    config = config_of(real_full_disk(app_config_text(small_disk)))
    app = Application(config)
    async with trio.open_nursery() as nursery:
        ready = await nursery.start(app.serve)
        try:
            outcome = await trio.to_thread.run_sync(scenario, ready.grpc_addresses[0], small_disk)
        finally:
            app.request_stop()
    failure = outcome["bytestream_failure"]
    assert failure is not None, "the disk never filled up"
    code, message = failure  # type: ignore[misc]
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, message
    assert "no space left" in message
    status = outcome["batch_status"]
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], status  # type: ignore[attr-defined]
    assert outcome["reads_while_full"] == [True] * 5
    assert outcome["failed_blob_missing"]
    assert outcome["temp_leftovers"] == []
    assert outcome["after_space_returns"] == (grpc.StatusCode.OK, "")
    assert outcome["read_after"]
    assert stray_files(small_disk) == []


def real_full_disk(text: str) -> str:
    """The config with no free-disk floor, so the small disk really fills
    (ENOSPC) instead of lre refusing 2 GiB before it (tests/cas cover the floor)."""
    return text.replace('max_bytes: "1GiB" }', 'max_bytes: "1GiB", min_free_disk: 0 }').replace(
        'max_bytes: "64MiB" }', 'max_bytes: "64MiB", min_free_disk: 0 }'
    )


def fill(disk: Path) -> Path:
    """A ballast file taking every byte left on ``disk``."""
    ballast = disk / "ballast-full"
    with ballast.open("wb", buffering=0) as sink:
        for size in (1 << 20, 64 << 10, 4 << 10, 512, 1):
            piece = b"\0" * size
            try:
                while True:
                    sink.write(piece)
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
    return ballast


def action_scenario(address: str, disk: Path) -> dict[str, object]:
    """Execute and cache writes while lre's state, journal and action-cache
    log are on a full disk (blocking client; runs in a thread)."""
    outcome: dict[str, object] = {}
    with Client(address, instance="main") as client:
        early = client.prepare(
            ["/bin/sh", "-c", "cat in > out"], inputs={"in": b"early\n"}, output_files=["out"]
        )
        first = response_of(client.execute(early)[-1])
        assert first.status.code == 0 and first.result.exit_code == 0, first
        outcome["early"] = (as_digest(early.action_digest), first.result)
        # An action whose output needs lre to store a Tree and a result
        # (uploaded while there is room: uploads to a full disk fail, see above).
        full = client.prepare(
            ["/bin/sh", "-c", "mkdir -p d && : > d/empty"],
            inputs={"in": b"while full\n"},
            output_directories=["d"],
        )
        ballast = fill(disk)
        late = response_of(client.execute(full)[-1])
        outcome["execute_status"] = (late.status.code, late.status.message)
        # A client's own cache write.
        try:
            client.action_cache.UpdateActionResult(
                re_pb2.UpdateActionResultRequest(
                    instance_name="main",
                    action_digest=digest(b"a made-up action"),
                    action_result=re_pb2.ActionResult(exit_code=0, stdout_raw=b"x" * 100_000),
                ),
                timeout=30,
            )
            outcome["update_status"] = (grpc.StatusCode.OK, "")
        except grpc.RpcError as error:
            outcome["update_status"] = (error.code(), error.details())
        outcome["early_while_full"] = (
            client.get_result(as_digest(early.action_digest)) == first.result
        )
        outcome["early_output"] = client.read(first.result.output_files[0].digest)
        ballast.unlink()
        again = response_of(client.execute(full)[-1])
        outcome["after_space_returns"] = (again.status.code, again.result.exit_code)
    return outcome


def results_of(address: str, actions: list[tuple[Digest, re_pb2.ActionResult]]) -> bool:
    """Whether the action cache serves exactly these results."""
    with Client(address, instance="main") as client:
        return all(client.get_result(d) == result for d, result in actions)


async def test_full_disk_fails_actions_and_cache_writes_resource_exhausted_keeps_all_stored(
    small_disk: Path,
) -> None:
    config = config_of(real_full_disk(app_config_text(small_disk)))
    app = Application(config)
    async with trio.open_nursery() as nursery:
        ready = await nursery.start(app.serve)
        try:
            outcome = await trio.to_thread.run_sync(
                action_scenario, ready.grpc_addresses[0], small_disk
            )
        finally:
            app.request_stop()
    code, message = outcome["execute_status"]  # type: ignore[misc]
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], message
    assert "no space left" in message.lower(), message
    update_code, update_message = outcome["update_status"]  # type: ignore[misc]
    assert update_code == grpc.StatusCode.RESOURCE_EXHAUSTED, update_message
    assert outcome["early_while_full"]
    assert outcome["early_output"] == b"early\n"
    assert outcome["after_space_returns"] == (0, 0)
    # Restarted on the same disk, nothing stored before it filled is lost.
    app = Application(config)
    async with trio.open_nursery() as nursery:
        ready = await nursery.start(app.serve)
        try:
            kept = await trio.to_thread.run_sync(
                results_of,
                ready.grpc_addresses[0],
                [outcome["early"]],
            )
        finally:
            app.request_stop()
    assert kept
    assert stray_files(small_disk) == []


FLOOR_MIB = 8


def floor_scenario(address: str, disk: Path) -> dict[str, object]:
    """Upload 1 MiB blobs until lre refuses one, then run an action with a
    1 MiB output; what lre said to each, and the disk's free bytes then
    (blocking client; runs in a thread)."""
    outcome: dict[str, object] = {"failure": None}
    with open_channel(address) as ch, Client(address, instance="main") as client:
        # Uploaded while there is room (the Action, Command and input root).
        big_output = client.prepare(
            ["/bin/sh", "-c", "head -c 1048576 /dev/zero > out"], output_files=["out"]
        )
        bytestream = bs_grpc.ByteStreamStub(ch)
        for _ in range(4 * SIZE_MIB):
            code, message = write(bytestream, os.urandom(1 << 20))
            if code != grpc.StatusCode.OK:
                outcome["failure"] = (code, message)
                break
        done = response_of(client.execute(big_output)[-1])
        outcome["execute_status"] = (done.status.code, done.status.message)
    stat = os.statvfs(disk)
    outcome["free_after"] = stat.f_bavail * stat.f_frsize
    return outcome


async def test_with_a_floor_uploads_stop_there_naming_it_and_lre_keeps_room(
    small_disk: Path,
) -> None:
    floor = f'min_free_disk: "{FLOOR_MIB}MiB" }}'
    text = (
        app_config_text(small_disk)
        .replace('max_bytes: "1GiB" }', f'max_bytes: "1GiB", {floor}')
        .replace('max_bytes: "64MiB" }', f'max_bytes: "64MiB", {floor}')
    )
    app = Application(config_of(text))
    async with trio.open_nursery() as nursery:
        ready = await nursery.start(app.serve)
        try:
            outcome = await trio.to_thread.run_sync(
                floor_scenario, ready.grpc_addresses[0], small_disk
            )
        finally:
            app.request_stop()
    failure = outcome["failure"]
    assert failure is not None, "lre stored more than the disk holds"
    code, message = failure  # type: ignore[misc]
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, message
    assert f"free-disk floor of {FLOOR_MIB << 20} bytes" in message, message
    assert "no space left" not in message.lower(), message
    # An action's output past the floor fails the same way.
    code, message = outcome["execute_status"]  # type: ignore[misc]
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], message
    assert f"free-disk floor of {FLOOR_MIB << 20} bytes" in message, message
    # The floor held (lre's state files took a few KiB of it), so lre's own
    # writes at stop found room: the hit counts were saved.
    free_after = outcome["free_after"]
    assert isinstance(free_after, int)
    assert free_after >= (FLOOR_MIB - 1) << 20, free_after
    assert (small_disk / "state" / HITS_FILE).stat().st_size > 0
    assert stray_files(small_disk) == []
