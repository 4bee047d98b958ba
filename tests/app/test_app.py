from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest
import trio

from lre.app import AppBuildError, Application, ReadyInfo
from lre.config import Config, resolve, worker_resources
from lre.config._loader import load_config_text
from lre.proto import re_grpc, re_pb2
from lre.worker.usage import _tree_peak
from tests._support.configs import app_config_text
from tests._support.servers import serve_app


def _capabilities(address: str) -> re_pb2.ServerCapabilities:
    with grpc.insecure_channel(address) as channel:
        stub = re_grpc.CapabilitiesStub(channel)
        reply: re_pb2.ServerCapabilities = stub.GetCapabilities(
            re_pb2.GetCapabilitiesRequest(instance_name="any/instance"), timeout=10
        )
        return reply


async def test_application_serves_and_stops_in_order(app_config: Config) -> None:
    app = Application(app_config)
    async with trio.open_nursery() as nursery:
        ready: ReadyInfo = await nursery.start(serve_app, app)
        assert len(ready.grpc_addresses) == 1
        caps = await trio.to_thread.run_sync(_capabilities, ready.grpc_addresses[0])
        assert caps.execution_capabilities.exec_enabled
        assert caps.high_api_version.minor >= 3
        app.request_stop()
        with trio.fail_after(30):
            await app.stopped.wait()

    # The listener is gone: a new call fails fast.
    def call_after_stop() -> grpc.StatusCode:
        try:
            _capabilities_short(ready.grpc_addresses[0])
        except grpc.RpcError as error:
            return error.code()
        return grpc.StatusCode.OK

    assert await trio.to_thread.run_sync(call_after_stop) == grpc.StatusCode.UNAVAILABLE


def _capabilities_short(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        re_grpc.CapabilitiesStub(channel).GetCapabilities(
            re_pb2.GetCapabilitiesRequest(), timeout=2
        )


async def test_work_directory_is_released_after_stop(app_config: Config) -> None:
    for _ in range(2):
        app = Application(app_config)
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_app, app)
            app.request_stop()
        assert app.stopped.is_set()


async def test_workers_offer_the_numbers_config_worked_out(tmp_path: Path) -> None:
    """Config alone works "auto" out: a worker built from a config still
    holding "auto" offers what the resolved config says."""
    text = app_config_text(tmp_path, max_inflight='"auto"', resources='memory_budget: "auto"')
    config = load_config_text(text, source="test.json5")
    resolved = resolve(config)
    local = resolved.workers[0].local
    assert local is not None and isinstance(local.max_inflight_tasks, int)
    for built in (config, resolved):
        app = Application(built)
        assert app.worker_resources == {"local": worker_resources(local)}
        info = await app.workers[0].describe()
        assert info.max_inflight == local.max_inflight_tasks
        assert info.capacity.millicpus == int(local.resources.cpu_count) * 1500
        assert info.capacity.memory_bytes == local.resources.memory_budget


def test_the_schedulers_resources_drive_its_workers_ceiling_and_the_snapshot(
    tmp_path: Path,
) -> None:
    """kill_factor and the ladder are the scheduler's: its worker's hard
    ceiling and the snapshot's kill line use them; one scheduler that does
    not learn builds no learner."""
    text = app_config_text(
        tmp_path,
        extra_scheduler=', resources: { kill_factor: 1.5, ladder: ["1GiB", "3GiB"], '
        "learner: { enabled: false } }",
        resources="cpu_count: 2, memory_budget: 0",
    )
    app = Application(resolve(load_config_text(text, source="t.json5")))
    ceiling = app.workers[0].ceiling
    assert (ceiling.top_bytes, ceiling.kill_factor) == (3 << 30, 1.5)
    assert app.assembler.kill_factor == 1.5
    assert app.learner is None


def test_the_protections_a_backend_lacks_are_reported(tmp_path: Path) -> None:
    portable = app_config_text(tmp_path, extra_worker=', containment: "portable"')
    missing = Application(resolve(load_config_text(portable, source="t.json5")))
    assert any("local: a PID namespace per action" in m for m in missing.protections_missing())
    (tmp_path / "b").mkdir()
    pidns = app_config_text(
        tmp_path / "b", extra_worker=', containment: "pidns", action_user: "unprivileged"'
    )
    assert (
        Application(resolve(load_config_text(pidns, source="t.json5"))).protections_missing() == ()
    )


def test_only_actions_on_lres_own_network_have_their_calls_judged(tmp_path: Path) -> None:
    """Under portable the listeners judge every call's peer (actions share
    lre's network); under pidns/userns lre's port does not exist for an
    action, so no listener judges calls (nothing per call)."""
    portable = app_config_text(tmp_path, extra_worker=', containment: "portable"')
    guarded = Application(resolve(load_config_text(portable, source="t.json5")))
    assert guarded.local_peers is not None
    assert all(s.options.local_peers is guarded.local_peers for s in guarded.servers)
    (tmp_path / "b").mkdir()
    pidns = app_config_text(
        tmp_path / "b", extra_worker=', containment: "pidns", action_user: "unprivileged"'
    )
    hidden = Application(resolve(load_config_text(pidns, source="t.json5")))
    assert hidden.workers[0].containment.hides_listeners
    assert hidden.local_peers is None
    assert all(s.options.local_peers is None for s in hidden.servers)


def test_an_action_user_that_cannot_work_fails_start_up_naming_the_field(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root lre gives its actions another user")
    text = app_config_text(
        tmp_path, extra_worker=', containment: "portable", action_user: "nobody"'
    )
    with pytest.raises(AppBuildError, match=r"workers\[0\]\.local\.action_user: .*only in a view"):
        Application(resolve(load_config_text(text, source="t.json5")))


def test_a_missing_gnu_time_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without GNU time, pid 1 reports no figure of the command's tree:
    ``/status`` (and so ``lre doctor``) names what is missing and why."""
    monkeypatch.setattr(_tree_peak, "TOOL", "lre-test-no-such-time")
    monkeypatch.setattr(_tree_peak, "_probed", [])
    pidns = app_config_text(
        tmp_path, extra_worker=', containment: "pidns", action_user: "unprivileged"'
    )
    missing = Application(resolve(load_config_text(pidns, source="t.json5"))).protections_missing()
    assert (
        "local: the kernel's memory figure of its short actions "
        "(GNU lre-test-no-such-time is not on PATH)"
    ) in missing, missing
