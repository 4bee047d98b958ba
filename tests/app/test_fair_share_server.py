"""Two builds through the real server share its one worker slot fairly.

Build A's first action holds the only slot until the test opens a gate (a
file outside /tmp, which the action's view hides), so A's other actions are
queued when build B's arrive. The assertion is the order in which the worker
started them (from the results' metadata: one slot, so one at a time), never
how long anything took.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from lre.app import Application
from lre.proto import re_pb2
from lre.scheduler import Stage
from tests._support.configs import app_config_text, config_of
from tests._support.reapi import Client, response_of
from tests._support.servers import serve_app

METADATA_KEY = "build.bazel.remote.execution.v2.requestmetadata-bin"


@pytest.fixture
def gate_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="lre-fair-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def metadata(tool: str, invocation: str) -> list[tuple[str, bytes]]:
    meta = re_pb2.RequestMetadata(
        tool_details=re_pb2.ToolDetails(tool_name=tool, tool_version="1"),
        tool_invocation_id=invocation,
        correlated_invocations_id="same-for-both",
    )
    return [(METADATA_KEY, meta.SerializeToString())]


def run_one(address: str, arguments: list[str], meta: list[tuple[str, bytes]]) -> float:
    """Execute one action; the time its run started (the worker's stamp)."""
    with Client(address) as client:
        operations = client.execute(client.prepare(arguments), metadata=meta, timeout=120)
    response = response_of(operations[-1])
    assert response.status.code == 0 and response.result.exit_code == 0, response
    stamp = response.result.execution_metadata.execution_start_timestamp
    return stamp.seconds + stamp.nanos / 1e9


async def wait_stage_count(app: Application, stage: Stage, count: int) -> None:
    """Until ``count`` operations are at ``stage`` (fails after a minute)."""
    scheduler = app.schedulers["queue"]
    with trio.fail_after(60):
        while True:
            if scheduler.statistics().by_stage[stage.name] >= count:
                return
            await trio.sleep(0.01)


async def started_order(tmp_path: Path, gate_dir: Path, extra_scheduler: str) -> str:
    text = app_config_text(tmp_path, max_inflight=1, extra_scheduler=extra_scheduler)
    app = Application(config_of(text))
    gate = gate_dir / "open"
    wait_for_gate = f"while [ ! -e {gate} ]; do sleep 0.01; done"
    started: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        ready = await nursery.start(serve_app, app)
        address = ready.grpc_addresses[0]

        async def run(label: str, script: str, meta: list[tuple[str, bytes]]) -> None:
            argv = ["/bin/sh", "-c", script, label]
            started[label] = await trio.to_thread.run_sync(run_one, address, argv, meta)

        async with trio.open_nursery() as clients:
            a = metadata("bazel", "build-a")
            clients.start_soon(run, "A0", wait_for_gate, a)
            await wait_stage_count(app, Stage.EXECUTING, 1)
            for i in range(1, 6):
                clients.start_soon(run, f"A{i}", "true", a)
            await wait_stage_count(app, Stage.QUEUED, 5)
            b = metadata("buck2", "build-b")
            for i in range(2):
                clients.start_soon(run, f"B{i}", "true", b)
            await wait_stage_count(app, Stage.QUEUED, 7)
            builds = app.schedulers["queue"].statistics().builds
            gate.touch()
        app.request_stop()
    if "enabled: false" not in extra_scheduler:
        by_invocation = {row.invocation: row for row in builds}
        assert (by_invocation["build-a"].running, by_invocation["build-a"].queued) == (1, 5)
        assert (by_invocation["build-b"].running, by_invocation["build-b"].queued) == (0, 2)
        assert by_invocation["build-b"].fair_share == pytest.approx(0.5)
    return "".join(label[0] for label in sorted(started, key=started.__getitem__))


async def test_a_second_clients_build_runs_between_the_first_ones_actions(
    tmp_path: Path, gate_dir: Path
) -> None:
    order = await started_order(tmp_path, gate_dir, "")
    # B's first action takes the slot A0 frees: B has used no share while A0
    # held the slot, whatever the clock says. Where B's second goes depends on
    # how long B0 ran against how long A0 held the slot after B arrived (real
    # time, so a loaded machine moves it); tests/scheduler pins that catch-up
    # down on a mock clock.
    assert order.startswith("AB") and sorted(order) == sorted("AAAAAABB"), order


async def test_with_fair_share_off_the_second_build_waits_for_the_first(
    tmp_path: Path, gate_dir: Path
) -> None:
    order = await started_order(tmp_path, gate_dir, ", fair_share: { enabled: false }")
    assert order == "AAAAAABB"
