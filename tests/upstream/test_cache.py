"""A laptop lre in front of a cluster lre: read-through, write-back policies,
the cluster going away mid-build. Both are real Applications on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
import trio

from lre.app import Application, ReadyInfo
from lre.cas import FastSlowActionCache, FastSlowStore, GrpcActionCache, GrpcStore
from lre.digest import Digest
from lre.scheduler import OperationSnapshot
from tests._support.actions import BuiltAction, shell_action
from tests._support.configs import config_of
from tests._support.reapi import Client
from tests._support.servers import serve_app
from tests.upstream._cluster import (
    MetadataRecorder,
    UpstreamLre,
    laptop_config_text,
    upstream_config_text,
)


async def start_laptop(
    nursery: trio.Nursery, root: Path, upstream_url: str, **options: str
) -> tuple[Application, Client]:
    app = Application(config_of(laptop_config_text(root, upstream_url, **options)))
    ready: ReadyInfo = await nursery.start(serve_app, app)
    return app, Client(ready.grpc_addresses[0], "team")


async def stop(app: Application) -> None:
    app.request_stop()
    with trio.fail_after(30):
        await app.stopped.wait()


async def execute_in_process(app: Application, action: BuiltAction) -> OperationSnapshot:
    """Submit to the laptop's scheduler (what its Execution service does)."""
    scheduler = app.schedulers["main"]
    snapshot = scheduler.submit(action.request)
    with trio.fail_after(60):
        async with scheduler.watch(snapshot.name) as updates:
            async for update in updates:
                snapshot = update
    return snapshot


def output_digest(snapshot: OperationSnapshot) -> Digest:
    assert snapshot.result is not None, snapshot
    (output,) = snapshot.result.output_files
    return Digest(output.digest.hash, output.digest.size_bytes)


@pytest.fixture
async def cluster(tmp_path: Path, nursery: trio.Nursery) -> UpstreamLre:
    upstream = UpstreamLre(config_of(upstream_config_text(tmp_path / "cluster")))
    return await upstream.start(nursery)


async def test_stores_are_built_as_tiers(cluster: UpstreamLre, tmp_path: Path) -> None:
    app = Application(config_of(laptop_config_text(tmp_path / "a", cluster.url)))
    try:
        cas = app.stores.blob("cas")
        assert isinstance(cas, FastSlowStore) and isinstance(cas.slow, GrpcStore)
        ac = app.stores.action_caches["ac"]
        assert isinstance(ac, FastSlowActionCache) and isinstance(ac.slow, GrpcActionCache)
        assert ac.slow.upstream_cas is cas.slow and ac.slow.blob_source is cas
        assert [s.state for s in app.stores.upstream_statistics()] == ["unknown", "unknown"]
    finally:
        await app.stores.close()


async def test_read_through_from_the_cluster(
    cluster: UpstreamLre, tmp_path: Path, nursery: trio.Nursery
) -> None:
    # A teammate's laptop builds and shares (success_only).
    teammate, teammate_client = await start_laptop(
        nursery, tmp_path / "teammate", cluster.url, upload_policy="success_only"
    )
    action = shell_action("echo shared output > out.txt", instance="team")
    await teammate_client.in_thread(teammate_client.upload, action.blobs)
    done = await execute_in_process(teammate, action)
    assert done.error is None and done.result is not None and done.result.exit_code == 0
    out = output_digest(done)
    cluster_client = Client(cluster.address, "team")
    assert await cluster_client.in_thread(cluster_client.get_result, action.digest) is not None
    assert await cluster_client.in_thread(cluster_client.read_blob, out) == b"shared output\n"
    await stop(teammate)

    # My laptop starts empty and gets the result and its output through the cluster.
    mine, client = await start_laptop(nursery, tmp_path / "mine", cluster.url)
    local_cas = mine.stores.blob("local-cas")
    local_ac = mine.stores.action_caches["local-ac"]
    assert await local_ac.get(action.digest) is None
    result = await client.in_thread(client.get_result, action.digest)
    assert result is not None and result.exit_code == 0
    assert await local_ac.get(action.digest) is not None  # filled on the hit
    assert await local_cas.has_many([out]) == [None]  # blobs are fetched lazily
    assert await client.in_thread(client.missing, [out]) == []  # present: it is upstream
    assert await client.in_thread(client.read_blob, out) == b"shared output\n"
    assert await local_cas.has_many([out]) == [out.size_bytes]  # read filled the local tier
    # The same action submitted to my laptop is a cache hit, nothing runs.
    again = await execute_in_process(mine, action)
    assert again.cached_result and again.result is not None
    await stop(mine)


@pytest.mark.parametrize("policy", ["never", "success_only", "everything"])
async def test_upload_policies(
    policy: str, cluster: UpstreamLre, tmp_path: Path, nursery: trio.Nursery
) -> None:
    app, client = await start_laptop(
        nursery, tmp_path / "laptop", cluster.url, upload_policy=policy
    )
    good = shell_action("echo good > out.txt", instance="team")
    bad = shell_action("echo bad > out.txt; exit 3", instance="team")
    for action in (good, bad):
        await client.in_thread(client.upload, action.blobs)
        done = await execute_in_process(app, action)
        assert done.result is not None and done.error is None
    assert (await execute_in_process(app, good)).cached_result  # local hit either way
    cluster_client = Client(cluster.address, "team")
    shared_good = await cluster_client.in_thread(cluster_client.get_result, good.digest)
    shared_bad = await cluster_client.in_thread(cluster_client.get_result, bad.digest)
    assert (shared_good is not None) == (policy != "never")
    assert (shared_bad is not None) == (policy == "everything")
    if shared_good is not None:
        (output,) = shared_good.output_files
        assert await cluster_client.in_thread(
            cluster_client.read_blob, Digest(output.digest.hash, output.digest.size_bytes)
        )
    await stop(app)


async def test_cluster_going_away_mid_build_keeps_local_serving(
    cluster: UpstreamLre, tmp_path: Path, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    app, client = await start_laptop(
        nursery, tmp_path / "laptop", cluster.url, upload_policy="success_only"
    )
    first = shell_action("echo one > out.txt", instance="team")
    await client.in_thread(client.upload, first.blobs)
    done = await execute_in_process(app, first)
    assert done.result is not None and done.result.exit_code == 0
    first_out = output_digest(done)

    await cluster.stop()

    # New work runs locally, its upload upstream is dropped with a warning.
    second = shell_action("cat in.txt > out.txt", instance="team", inputs={"in.txt": b"two\n"})
    await client.in_thread(client.upload, second.blobs)
    assert await client.in_thread(client.missing, list(second.blobs)) == []
    done = await execute_in_process(app, second)
    assert done.error is None and done.result is not None and done.result.exit_code == 0
    assert await client.in_thread(client.read_blob, output_digest(done)) == b"two\n"
    # Earlier results and outputs are still served from the local tier.
    assert await client.in_thread(client.get_result, first.digest) is not None
    assert await client.in_thread(client.read_blob, first_out) == b"one\n"
    assert (await execute_in_process(app, first)).cached_result
    # Unknown blobs are simply missing (not UNAVAILABLE).
    unknown = shell_action("echo never uploaded", instance="team")
    assert await client.in_thread(client.get_result, unknown.digest) is None
    non_empty = {d for d in unknown.blobs if d.size_bytes}
    assert set(await client.in_thread(client.missing, list(non_empty))) == non_empty
    # Visible health, one warning per upstream for the transition.
    states = {s.name: s for s in app.stores.upstream_statistics()}
    assert not states["upstream-cas"].healthy and states["upstream-cas"].transitions_down == 1
    warnings = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(warnings) == 2, [r.getMessage() for r in warnings]  # upstream-cas, upstream-ac
    await stop(app)


async def test_bearer_token_reaches_the_cluster(tmp_path: Path, nursery: trio.Nursery) -> None:
    recorder = MetadataRecorder(token="team-token")
    cluster = UpstreamLre(
        config_of(upstream_config_text(tmp_path / "cluster")), interceptor=recorder
    )
    await cluster.start(nursery)
    app, client = await start_laptop(
        nursery,
        tmp_path / "laptop",
        cluster.url,
        upload_policy="everything",
        headers='{ authorization: "Bearer team-token" }',
    )
    action = shell_action("echo authed > out.txt", instance="team")
    await client.in_thread(client.upload, action.blobs)
    done = await execute_in_process(app, action)
    assert done.result is not None and done.result.exit_code == 0
    tokenless = Client(cluster.address, "team")  # this test client sends no token
    with tokenless, pytest.raises(grpc.RpcError) as refused:
        await tokenless.in_thread(tokenless.get_result, action.digest)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert recorder.refused == 1
    methods = [m for m, md in recorder.calls if md.get("authorization") == "Bearer team-token"]
    names = {m.rsplit("/", 1)[-1] for m in methods}
    assert {"UpdateActionResult", "FindMissingBlobs"} <= names
    assert all(s.healthy for s in app.stores.upstream_statistics())
    await stop(app)
    await cluster.stop()
