"""configs/team-cache.json5 loads, builds and works against a cluster lre."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import trio

from lre.app import Application, ReadyInfo
from lre.cas import FastSlowActionCache, FastSlowStore, GrpcActionCache, GrpcStore
from lre.config import Config, load_config, resolve
from tests._support.actions import shell_action
from tests._support.configs import config_of
from tests._support.reapi import Client
from tests._support.servers import serve_app
from tests.upstream._cluster import UpstreamLre, upstream_config_text
from tests.upstream.test_cache import output_digest, stop

CONFIG = Path(__file__).parents[2] / "configs" / "team-cache.json5"


async def test_team_cache_config_against_a_cluster(
    tmp_path: Path, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = UpstreamLre(
        config_of(upstream_config_text(tmp_path / "cluster", os_family=("linux", "windows")))
    )
    await cluster.start(nursery)
    # A shared result the laptop has never seen.
    shared = shell_action("echo from the team > out.txt", instance="main")
    cluster_client = Client(cluster.address, "main")
    await cluster_client.in_thread(cluster_client.upload, shared.blobs)
    scheduler = cluster.app.schedulers["main"]
    async with scheduler.watch(scheduler.submit(shared.request).name) as updates:
        async for update in updates:
            snapshot = update
    shared_out = output_digest(snapshot)

    monkeypatch.setenv("LRE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LRE_UPSTREAM", cluster.url)
    monkeypatch.setenv("LRE_UPSTREAM_INSTANCE", "main")
    monkeypatch.setenv("LRE_UPSTREAM_TOKEN", "")
    config = resolve(load_config(CONFIG))
    listener = config.servers[0].listener
    assert listener.address == "127.0.0.1:50051"
    config = config_of_port_zero(config)
    app = Application(config)
    cas = app.stores.blob("cas")
    assert isinstance(cas, FastSlowStore) and isinstance(cas.slow, GrpcStore)
    ac = app.stores.action_caches["ac"]
    assert isinstance(ac, FastSlowActionCache) and isinstance(ac.slow, GrpcActionCache)
    assert ac.slow.upload_policy == "never"
    forwarder = app.forwarders["forward"]
    assert forwarder.rules.unsatisfiable and forwarder.rules.overflow_queue_depth == 0
    ready: ReadyInfo = await nursery.start(serve_app, app)
    client = Client(ready.grpc_addresses[0], "main")
    # Read-through of the team's result and output.
    result = await client.in_thread(client.get_result, shared.digest)
    assert result is not None and result.exit_code == 0
    assert await client.in_thread(client.read_blob, shared_out) == b"from the team\n"
    # A windows action is forwarded, a plain one runs on the laptop.
    windows = shell_action("echo win > out.txt", platform={"OSFamily": "windows"}, instance="main")
    plain = shell_action("echo here > out.txt", instance="main")
    for action, remote in ((windows, True), (plain, False)):
        await client.in_thread(client.upload, action.blobs)
        snapshot = forwarder.submit(action.request)
        with trio.fail_after(60):
            async with forwarder.watch(snapshot.name) as updates:
                async for update in updates:
                    snapshot = update
        assert snapshot.error is None and snapshot.result is not None, snapshot
        assert snapshot.result.exit_code == 0
        assert forwarder.is_forwarded(snapshot.name) == remote
    # upload_policy "never": the laptop's own result did not reach the team cache.
    assert await cluster_client.in_thread(cluster_client.get_result, plain.digest) is None
    assert (tmp_path / "home" / "cas").is_dir()
    await stop(app)
    await cluster.stop()


def config_of_port_zero(config: Config) -> Config:
    """The same config listening on a free port and without a status listener."""
    server = config.servers[0]
    listener = dataclasses.replace(server.listener, address="127.0.0.1:0")
    servers = (dataclasses.replace(server, listener=listener),)
    status = dataclasses.replace(config.global_.status, address="")
    local_cas = config.stores[0].filesystem
    assert local_cas is not None
    state = str(Path(local_cas.content_path).parent / "state")
    global_ = dataclasses.replace(config.global_, status=status, state_dir=state)
    return dataclasses.replace(config, servers=servers, global_=global_)
