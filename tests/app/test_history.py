"""The history recorder in a real lre: every action a client ran or looked up
is in the state dir afterwards, with its target, phases and build; a full
disk stops recording, never serving."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import psutil
import pytest
import trio

from lre.app import Application
from lre.app._history import HistoryRecorder
from lre.app._snapshot import SnapshotAssembler
from lre.cli._daemon import RunningServer, write_pid_file
from lre.config import Config
from lre.proto import re_pb2
from lre.scheduler import RequestInfo, Stage
from lre.service import InvocationSpans
from lre.snapshot import ActionRecord, Phase, Source, read_history, summarize_builds
from lre.snapshot._history_file import CURRENT_NAME
from tests._support.configs import app_config_text, config_of
from tests._support.reapi import Client, response_of
from tests._support.scheduler import execute_request, start_harness
from tests._support.servers import free_port, serve_app
from tests.cli._lre import run_lre

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
    text = app_config_text(tmp_path, extra_global=", history: { enabled: false }")
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


def test_a_build_with_actions_running_is_the_current_build(tmp_path: Path) -> None:
    """The TUI's current build: one whose actions still run is current even
    before its first action ends, and stays current through a long action
    with nothing else finishing (a 2-minute link at the end)."""
    now = [1_000.0]
    recorder = HistoryRecorder(tmp_path, max_bytes=1 << 20, clock=lambda: now[0])
    recorder.record(ActionRecord(at=900.0, source=Source.EXECUTED, invocation="old", tool="b"))
    now[0] = 1_000.0
    lines = recorder.build_lines(active={"new": ("bazel 7.1.0", 990.0)})
    assert [(b.invocation, b.running, b.executed) for b in lines] == [
        ("new", True, 0),
        ("old", False, 1),
    ]
    assert lines[0].client == "bazel 7.1.0" and lines[0].started_at == 990.0
    recorder.record(ActionRecord(at=1_001.0, source=Source.EXECUTED, invocation="new"))
    now[0] = 1_100.0  # 99 s without a finished action, one still running
    current, _ = recorder.build_lines(active={"new": ("bazel 7.1.0", 1_050.0)})
    assert (current.invocation, current.running, current.executed) == ("new", True, 1)
    assert current.started_at == 990.0  # from when its first action was seen running
    (current,) = recorder.build_lines()  # one line for the newest build that ended
    assert current.invocation == "new" and not current.running  # the last build only


def test_the_recorder_keeps_only_the_newest_builds(tmp_path: Path) -> None:
    """Builds seen through ended actions and through running ones are kept up
    to ``KEPT_BUILDS`` together, the oldest forgotten first (a long-running
    lre does not grow a line per build ever seen)."""
    recorder = HistoryRecorder(tmp_path, max_bytes=1 << 20, clock=lambda: 2_000.0)
    for n in range(HistoryRecorder.KEPT_BUILDS + 5):
        recorder.record(ActionRecord(at=1_000.0 + n, source=Source.EXECUTED, invocation=f"b{n}"))
    recorder.build_lines(active={f"a{n}": ("bazel 7.1.0", 1_500.0) for n in range(3)})
    kept = list(recorder._builds)
    assert len(kept) == HistoryRecorder.KEPT_BUILDS
    assert kept[-3:] == ["a0", "a1", "a2"] and "b7" not in kept and "b8" in kept


def test_the_tuis_build_line_counts_a_ctrl_c_as_cancelled_not_failed(tmp_path: Path) -> None:
    """A build stopped with Ctrl-C: three runs cancelled under way and 41
    never started are 44 cancelled, 0 failed; a real failure still counts."""
    recorder = HistoryRecorder(tmp_path, max_bytes=1 << 20, clock=lambda: 2_000.0)
    for n in range(44):
        source = Source.EXECUTED if n < 3 else Source.NOT_RUN
        recorder.record(
            ActionRecord(at=1_000.0 + n, source=source, invocation="c", error="CANCELLED")
        )
    recorder.record(ActionRecord(at=1_050.0, source=Source.EXECUTED, invocation="c", exit_code=1))
    (line,) = recorder.build_lines()
    assert (line.failed, line.cancelled, line.executed) == (1, 44, 4)


async def test_the_snapshot_shows_a_build_current_while_its_first_action_runs(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    recorder = HistoryRecorder(tmp_path, max_bytes=1 << 20)
    harness = await start_harness(nursery, on_record=recorder.record_later)
    assembler = SnapshotAssembler(
        address="127.0.0.1:0", scheduler=harness.scheduler.statistics, history=recorder
    )
    worker = await harness.add_worker()
    info = RequestInfo(tool_name="bazel", tool_version="7.1.0", tool_invocation_id="inv-run")
    op = harness.scheduler.submit(
        execute_request(await harness.builder.action()), request_info=info
    )
    lease = await worker.next_lease()
    (current,) = assembler().builds  # nothing has ended yet
    assert (current.invocation, current.client, current.running) == (
        "inv-run",
        "bazel 7.1.0",
        True,
    )
    worker.complete(lease)
    await harness.wait_stage(op.name, Stage.COMPLETED)
    (current,) = assembler().builds
    assert (current.invocation, current.executed) == ("inv-run", 1)


async def test_lre_builds_sees_every_action_the_moment_its_client_has_the_reply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the periodic flush an hour away, ``lre builds`` run the moment the
    client has its last reply still counts every action and the build's span:
    it asks the running lre to write what it holds first."""
    monkeypatch.setattr(HistoryRecorder, "FLUSH_INTERVAL_S", 3600.0)
    text = app_config_text(tmp_path / "root", status_port=free_port())
    config_file = tmp_path / "lre.json5"
    config_file.write_text(text)
    app = Application(config_of(text))
    invocation = str(uuid.uuid4())
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    env.pop("LRE_HOME", None)
    async with trio.open_nursery() as nursery:
        ready = await nursery.start(serve_app, app)
        state = Path(app.config.global_.state_dir)
        write_pid_file(
            state,
            RunningServer(
                pid=os.getpid(),
                grpc_address=ready.grpc_addresses[0],
                status_address=ready.status_address,
                repo="",
                log_file="",
                started=psutil.Process().create_time(),
            ),
        )
        await trio.to_thread.run_sync(_build, ready.grpc_addresses[0], invocation)
        done = await trio.to_thread.run_sync(
            lambda: run_lre("builds", "--json", "--config", str(config_file), cwd=tmp_path, env=env)
        )
        app.request_stop()
    assert done.returncode == 0, done.stderr
    (build,) = json.loads(done.stdout)
    assert build["invocation"] == invocation
    assert (build["executed"], build["cache_hits"]["get_action_result"]) == (2, 1)


def test_concurrent_builds_get_a_line_each_and_a_finished_one_stops_running(
    tmp_path: Path,
) -> None:
    """Two builds with calls open are two running lines, each with its
    repository and timed by its span; once a build's last call ended it is
    the one "last build" line within ``SPAN_IDLE_S``, not 10 s later."""
    now = [1_000.0]
    spans = InvocationSpans(clock=lambda: now[0])
    recorder = HistoryRecorder(tmp_path, max_bytes=1 << 20, spans=spans, clock=lambda: now[0])
    app_call = spans.opened([*_metadata("app", "//a"), ("x-lre-repository", "app-1")])
    now[0] = 1_002.0
    web_call = spans.opened([*_metadata("web", "//w"), ("x-lre-repository", "web-2")])
    old_call = spans.opened(_metadata("old", "//o"))
    assert app_call is not None and web_call is not None and old_call is not None
    spans.closed(old_call)
    recorder.record(ActionRecord(at=1_002.0, source=Source.EXECUTED, invocation="old"))
    clean_call = spans.opened(_metadata("clean", "//c"))  # `bazel clean`: calls, no action
    assert clean_call is not None
    spans.closed(clean_call)
    now[0] = 1_010.0
    recorder.record(ActionRecord(at=1_009.0, source=Source.EXECUTED, invocation="app"))
    lines = recorder.build_lines()
    assert [(b.invocation, b.repository, b.running) for b in lines] == [
        ("app", "app-1", True),
        ("web", "web-2", True),
        ("old", "", False),
    ]
    assert lines[0].started_at == 1_000.0 and lines[0].executed == 1
    spans.closed(app_call)
    now[0] = 1_010.0 + HistoryRecorder.SPAN_IDLE_S + 0.1
    lines = recorder.build_lines()
    assert [(b.invocation, b.running) for b in lines] == [("web", True), ("app", False)]
    assert (lines[1].started_at, lines[1].ended_at) == (1_000.0, 1_010.0)
