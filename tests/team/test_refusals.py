"""What BuildGrid refuses, and how lre keeps the build going (in-process lre,
real BuildGrid): its scheduler knows only OSFamily and ISA, so an action
forwarded with lre's cpu_count is refused (FAILED_PRECONDITION
"Unregistered platform property"). forward.platform drops that key by
default; when it does not, an action the laptop can run runs locally and one
it cannot fails with FAILED_PRECONDITION carrying BuildGrid's reason."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
import trio

from lre.scheduler import Stage
from tests._support.actions import shell_action
from tests.team._buildgrid import INSTANCE, BuildGrid
from tests.upstream.test_cache import output_digest, stop
from tests.upstream.test_forward import forward_block, run, run_all, start

KEEP_EVERYTHING = "{ drop: [] }"


async def test_lre_keys_are_dropped_by_default_and_refused_otherwise(
    tmp_path: Path, nursery: trio.Nursery, running_buildgrid: BuildGrid
) -> None:
    url = running_buildgrid.url
    # The laptop's worker offers no ISA: only BuildGrid's can run this.
    action = shell_action(
        "echo team > out.txt",
        platform={"cpu_count": "1", "ISA": "x86-64"},
        instance=INSTANCE,
        salt=uuid.uuid4().hex,
    )
    block = forward_block(url, platform=KEEP_EVERYTHING, instance=INSTANCE)
    app, forwarder, client = await start(nursery, tmp_path / "keeps", url, block, instance=INSTANCE)
    await client.in_thread(client.upload, action.blobs)
    done, _ = await run(forwarder, action)
    assert done.error is not None and done.error.code == 9, done  # FAILED_PRECONDITION
    assert "cannot run on a local worker" in done.error.message
    assert "cpu_count" in done.error.message, done.error.message  # BuildGrid's reason
    assert forwarder.forward_statistics().refused == {"FAILED_PRECONDITION": 1}
    await stop(app)

    block = forward_block(url, instance=INSTANCE)  # default: drop cpu_count, memory_kb
    app, forwarder, client = await start(nursery, tmp_path / "drops", url, block, instance=INSTANCE)
    await client.in_thread(client.upload, action.blobs)
    done, stages = await run(forwarder, action)
    assert done.error is None and done.result is not None, done
    assert done.result.exit_code == 0 and forwarder.is_forwarded(done.name)
    assert stages[-1] == Stage.COMPLETED
    assert await client.in_thread(client.read_blob, output_digest(done)) == b"team\n"
    statistics = forwarder.forward_statistics()
    assert statistics.completed_upstream == 1 and statistics.upstream.state == "up"
    await stop(app)


async def test_refused_overflow_actions_run_locally_logged_once(
    tmp_path: Path,
    nursery: trio.Nursery,
    running_buildgrid: BuildGrid,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = running_buildgrid.url
    block = forward_block(
        url, unsatisfiable=False, overflow=1, platform=KEEP_EVERYTHING, instance=INSTANCE
    )
    app, forwarder, client = await start(
        nursery, tmp_path / "laptop", url, block, instance=INSTANCE
    )
    salt = uuid.uuid4().hex
    actions = [
        shell_action(
            f"sleep 0.3; echo {i} > out.txt",
            platform={"cpu_count": "1"},
            instance=INSTANCE,
            salt=f"{salt}-{i}",
        )
        for i in range(6)
    ]
    for action in actions:
        await client.in_thread(client.upload, action.blobs)
    with caplog.at_level(logging.WARNING, logger="lre.scheduler"):
        results = await run_all(forwarder, actions)  # all at once: some overflow
    statistics = forwarder.forward_statistics()
    refusals = statistics.fallbacks.get("FAILED_PRECONDITION", 0)
    assert refusals >= 1 and statistics.fell_back_local == refusals, statistics
    assert statistics.completed_upstream == 0
    for i, done in results.items():
        assert done.error is None and done.result is not None, done
        assert done.result.exit_code == 0 and not forwarder.is_forwarded(done.name)
        assert await client.in_thread(client.read_blob, output_digest(done)) == f"{i}\n".encode()
    logged = [r for r in caplog.records if "did not run a forwarded action" in r.getMessage()]
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert "Unregistered platform property" in logged[0].getMessage()
    await stop(app)
