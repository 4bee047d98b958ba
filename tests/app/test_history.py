"""The history recorder in a real lre: every action a client ran or looked up
is in the state dir afterwards, with its target, phases and build; a full
disk stops recording, never serving."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import trio

from lre.app import Application
from lre.config import Config
from lre.proto import re_pb2
from lre.snapshot import ActionRecord, Phase, Source, read_history, summarize_builds
from lre.snapshot._history_file import CURRENT_NAME
from tests._support.configs import app_config_text, config_of
from tests._support.reapi import Client, response_of
from tests._support.servers import serve_app

METADATA_KEY = "build.bazel.remote.execution.v2.requestmetadata-bin"


def _metadata(invocation: str, target: str) -> list[tuple[str, bytes]]:
    meta = re_pb2.RequestMetadata(
        tool_details=re_pb2.ToolDetails(tool_name="bazel", tool_version="7.1.0"),
        tool_invocation_id=invocation,
        action_mnemonic="Genrule",
        target_id=target,
    )
    return [(METADATA_KEY, meta.SerializeToString())]


def _build(address: str, invocation: str) -> None:
    """Two genrules run, then the first is looked up again (a hit)."""
    with Client(address) as client:
        first = client.prepare(["/bin/sh", "-c", "echo one > out"], output_paths=["out"])
        second = client.prepare(["/bin/sh", "-c", "exit 3"])
        for prepared, target in ((first, "//pkg:one"), (second, "//pkg:two")):
            operations = client.execute(prepared, metadata=_metadata(invocation, target))
            assert operations[-1].done
        assert response_of(operations[-1]).result.exit_code == 3
        client.action_cache.GetActionResult(
            re_pb2.GetActionResultRequest(
                instance_name=client.instance, action_digest=first.action_digest
            ),
            metadata=_metadata(invocation, "//pkg:one"),
            timeout=30,
        )


async def _serve_and_build(config: Config, invocation: str) -> Application:
    app = Application(config)
    async with trio.open_nursery() as nursery:
        ready = await nursery.start(serve_app, app)
        await trio.to_thread.run_sync(_build, ready.grpc_addresses[0], invocation)
        app.request_stop()
    return app


async def test_every_action_is_recorded_and_survives_a_restart(app_config: Config) -> None:
    state = Path(app_config.global_.state_dir)
    invocation = str(uuid.uuid4())
    await _serve_and_build(app_config, invocation)
    records = [r for r in read_history(state) if isinstance(r, ActionRecord)]
    by_target = {(r.target, r.source): r for r in records}
    one = by_target[("//pkg:one", Source.EXECUTED)]
    two = by_target[("//pkg:two", Source.EXECUTED)]
    hit = by_target[("//pkg:one", Source.LOOKUP_HIT)]
    assert one.invocation == invocation and one.tool == "bazel 7.1.0"
    assert one.mnemonic == "Genrule" and one.exit_code == 0 and two.exit_code == 3
    assert [s.phase for s in one.spans] == [
        Phase.QUEUED,
        Phase.STAGING,
        Phase.RUNNING,
        Phase.STORING,
    ]
    assert one.attempts == 1 and one.reserved_millicpus > 0 and one.worker == "local"
    assert hit.invocation == invocation and hit.exit_code == 0
    (build,) = summarize_builds(records)
    assert (build.executed, build.lookup_hits, build.failed) == (2, 1, 1)
    assert build.client == "bazel 7.1.0"

    # a second lre on the same state dir appends to what the first wrote
    await _serve_and_build(app_config, "second-build")
    builds = summarize_builds(r for r in read_history(state) if isinstance(r, ActionRecord))
    assert [b.invocation for b in builds] == [invocation, "second-build"]


async def test_a_full_disk_stops_recording_not_serving(app_config: Config) -> None:
    state = Path(app_config.global_.state_dir)
    os.makedirs(state)
    os.symlink("/dev/full", state / CURRENT_NAME)  # every write fails with ENOSPC
    app = await _serve_and_build(app_config, "full-disk")  # asserts the build worked
    assert app.history is not None
    assert app.history.recorded >= 3 and app.history.dropped >= 3
    assert list(read_history(state)) == []


async def test_with_history_off_nothing_is_recorded_and_builds_work(tmp_path: Path) -> None:
    """``global.history.enabled: false`` switches the whole recording off (the
    scheduler's tap, the lookup hook, the writer and the host sampling): the
    recording-cost A/B runs the same tree with it on and off."""
    text = app_config_text(tmp_path).replace("global: {", "global: { history: { enabled: false },")
    config = config_of(text)
    app = await _serve_and_build(config, "no-history")  # asserts the build worked
    assert app.history is None
    state = Path(config.global_.state_dir)
    assert not (state / CURRENT_NAME).exists()
    assert list(read_history(state)) == []


async def test_an_execute_answered_from_the_cache_is_an_execute_hit(app_config: Config) -> None:
    def build(address: str) -> None:
        with Client(address) as client:
            prepared = client.prepare(["/bin/sh", "-c", "echo hi > out"], output_paths=["out"])
            for _ in range(2):  # the second Execute finds the first's result
                operations = client.execute(prepared, metadata=_metadata("hits", "//pkg:hit"))
                assert response_of(operations[-1]).result.exit_code == 0
            assert response_of(operations[-1]).cached_result

    app = Application(app_config)
    async with trio.open_nursery() as nursery:
        ready = await nursery.start(serve_app, app)
        await trio.to_thread.run_sync(build, ready.grpc_addresses[0])
        app.request_stop()
    records = [r for r in read_history(app_config.global_.state_dir) if isinstance(r, ActionRecord)]
    assert [r.source for r in records] == [Source.EXECUTED, Source.EXECUTE_HIT]
    (summary,) = summarize_builds(records)
    assert (summary.executed, summary.execute_hits, summary.lookup_hits) == (1, 1, 0)
    assert summary.to_json()["cache_hits"] == {"execute": 1, "get_action_result": 0}
