"""Forwarding from a laptop lre to a cluster lre: unsatisfiable-locally and
overflow rules, results streamed back and read through the laptop's CAS."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from lre.app import Application, ReadyInfo
from lre.scheduler import ForwardScheduler, OperationSnapshot, Stage
from lre.service._metadata import REPOSITORY_KEY
from lre.service.execution import STAGE_SETTLE_S
from tests._support.actions import BuiltAction, shell_action
from tests._support.configs import config_of
from tests._support.reapi import Client, response_of
from tests._support.servers import serve_app
from tests.upstream._cluster import (
    MetadataRecorder,
    UpstreamLre,
    laptop_config_text,
    upstream_config_text,
)
from tests.upstream.test_cache import output_digest, stop


def forward_block(
    url: str,
    *,
    unsatisfiable: bool = True,
    overflow: int = 0,
    platform: str = "{}",
    instance: str = "team",
) -> str:
    return f"""{{ name: "main", property_modifier: {{
        modifications: [{{ add: {{ name: "cpu_count", value: "1" }} }}], scheduler: "fwd" }} }},
    {{ name: "fwd", forward: {{ local: "queue", endpoint: {{ address: "{url}" }},
        instance_name: "{instance}", upstream_cas_store: "upstream-cas", platform: {platform},
        rules: {{ unsatisfiable: {str(unsatisfiable).lower()},
                 overflow_queue_depth: {overflow} }} }} }}"""


async def start(
    nursery: trio.Nursery, root: Path, url: str, block: str, *, instance: str = "team"
) -> tuple[Application, ForwardScheduler, Client]:
    # fast_only: client uploads stay local, so forwarding must upload the inputs.
    text = laptop_config_text(
        root, url, scheduler_block=block, cas_write_policy="fast_only", instance=instance
    )
    app = Application(config_of(text))
    ready: ReadyInfo = await nursery.start(serve_app, app)
    return app, app.forwarders["fwd"], Client(ready.grpc_addresses[0], instance)


async def run(
    forwarder: ForwardScheduler, action: BuiltAction
) -> tuple[OperationSnapshot, list[Stage]]:
    snapshot = forwarder.submit(action.request)
    stages: list[Stage] = []
    with trio.fail_after(60):
        async with forwarder.watch(snapshot.name) as updates:
            async for update in updates:
                snapshot = update
                if not stages or stages[-1] != update.stage:
                    stages.append(update.stage)
    return snapshot, stages


async def test_unsatisfiable_actions_run_on_the_cluster(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    cluster = UpstreamLre(
        config_of(upstream_config_text(tmp_path / "cluster", os_family=("windows",)))
    )
    await cluster.start(nursery)
    app, forwarder, client = await start(
        nursery, tmp_path / "laptop", cluster.url, forward_block(cluster.url)
    )
    # Runs long enough for the cluster to stream its EXECUTING stage, which
    # the forwarder must relay (a shorter stage is not streamed).
    windows = shell_action(
        f"sleep {STAGE_SETTLE_S + 0.3:g}; cat in.txt in.txt > out.txt",
        platform={"OSFamily": "windows"},
        instance="team",
        inputs={"in.txt": b"forwarded\n"},
    )
    await client.in_thread(client.upload, windows.blobs)
    cluster_client = Client(cluster.address, "team")
    # Not upstream yet:
    assert await cluster_client.in_thread(cluster_client.missing, list(windows.blobs))
    done, stages = await run(forwarder, windows)
    assert done.error is None, done.error
    assert done.result is not None and done.result.exit_code == 0
    assert "forwarded to upstream" in done.message and "OSFamily" in done.message
    assert forwarder.is_forwarded(done.name)
    assert stages[-1] == Stage.COMPLETED and Stage.EXECUTING in stages
    # The inputs were uploaded; the output stayed upstream until read through.
    non_empty = [d for d in windows.blobs if d.size_bytes]
    assert await cluster_client.in_thread(cluster_client.missing, non_empty) == []
    out = output_digest(done)
    assert await app.stores.blob("local-cas").has_many([out]) == [None]
    assert await client.in_thread(client.read_blob, out) == b"forwarded\nforwarded\n"
    stats = forwarder.forward_statistics()
    assert stats.forwarded == {"unsatisfiable": 1} and stats.completed_upstream == 1
    assert stats.inflight == () and stats.upstream.healthy

    # A linux action stays local: the cluster's windows worker could not run it.
    linux = shell_action("echo local > out.txt", platform={"OSFamily": "linux"}, instance="team")
    await client.in_thread(client.upload, linux.blobs)
    done, _ = await run(forwarder, linux)
    assert done.result is not None and done.result.exit_code == 0, done
    assert not forwarder.is_forwarded(done.name)
    assert forwarder.forward_statistics().forwarded == {"unsatisfiable": 1}

    # With the cluster gone, a windows action fails FAILED_PRECONDITION naming
    # the upstream's reason; linux still runs.
    await cluster.stop()
    other = shell_action("echo again > out.txt", platform={"OSFamily": "windows"}, instance="team")
    await client.in_thread(client.upload, other.blobs)
    done, _ = await run(forwarder, other)
    assert done.error is not None and done.error.code == 9, done
    assert "cannot run on a local worker" in done.error.message
    assert "UNAVAILABLE" in done.error.message, done.error.message
    assert forwarder.forward_statistics().refused == {"UNAVAILABLE": 1}
    local_again = shell_action("echo still > out.txt", instance="team")
    await client.in_thread(client.upload, local_again.blobs)
    done, _ = await run(forwarder, local_again)
    assert done.error is None and done.result is not None and done.result.exit_code == 0
    await stop(app)


async def run_all(
    forwarder: ForwardScheduler, actions: list[BuiltAction], *, gap_s: float = 0.0
) -> dict[int, OperationSnapshot]:
    """Submit every action (``gap_s`` apart) and wait for all; results by index."""
    results: dict[int, OperationSnapshot] = {}

    async def one(i: int) -> None:
        results[i], _ = await run(forwarder, actions[i])

    async with trio.open_nursery() as inner:
        for i in range(len(actions)):
            inner.start_soon(one, i)
            if gap_s:
                await trio.sleep(gap_s)
    return results


@pytest.mark.parametrize("gap_s", [0.05, 0.0])
async def test_overflow_goes_to_the_cluster(
    tmp_path: Path, nursery: trio.Nursery, gap_s: float
) -> None:
    # gap 0: Bazel sends a build's independent actions at once, and none of
    # them is queued locally yet when the next is routed, so the rule must
    # count the actions it routed locally that do not execute yet.
    cluster = UpstreamLre(config_of(upstream_config_text(tmp_path / "cluster", max_inflight=4)))
    await cluster.start(nursery)
    block = forward_block(cluster.url, unsatisfiable=False, overflow=1)
    app, forwarder, client = await start(nursery, tmp_path / "laptop", cluster.url, block)
    actions = [
        shell_action(f"sleep 0.4; echo {i} > out.txt", instance="team", salt=f"{gap_s}-{i}")
        for i in range(6)
    ]
    for action in actions:
        await client.in_thread(client.upload, action.blobs)
    results = await run_all(forwarder, actions, gap_s=gap_s)
    forwarded = [i for i, r in results.items() if forwarder.is_forwarded(r.name)]
    assert forwarded and len(forwarded) < len(actions), forwarded
    if not gap_s:
        # The laptop's worker runs one at a time: the first runs, one more waits.
        assert len(forwarded) == len(actions) - 2, forwarded
    for i, done in results.items():
        assert done.error is None and done.result is not None and done.result.exit_code == 0
        assert await client.in_thread(client.read_blob, output_digest(done)) == f"{i}\n".encode()
    assert forwarder.forward_statistics().forwarded == {"overflow": len(forwarded)}
    await stop(app)
    await cluster.stop()


async def test_the_repository_header_reaches_no_upstream(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """The client's ``x-lre-repository`` header names lre's learned history
    only: a forwarded Execute carries lre's configured headers, and the action
    reaches the cluster under the digest the client sent."""
    recorder = MetadataRecorder()
    cluster = UpstreamLre(
        config_of(upstream_config_text(tmp_path / "cluster", os_family=("windows",))),
        interceptor=recorder,
    )
    await cluster.start(nursery)
    _, forwarder, client = await start(
        nursery, tmp_path / "laptop", cluster.url, forward_block(cluster.url)
    )
    action = shell_action("echo hi > out.txt", platform={"OSFamily": "windows"}, instance="team")
    await client.in_thread(client.upload, action.blobs)
    sent = [(REPOSITORY_KEY, "proj-1a2b3c4d")]
    operations = await client.in_thread(
        lambda: client.execute(action.digest.to_proto(), metadata=sent)
    )
    assert response_of(operations[-1]).result.exit_code == 0
    assert forwarder.forward_statistics().forwarded == {"unsatisfiable": 1}
    executes = [md for method, md in recorder.calls if method.endswith("/Execute")]
    assert executes, recorder.methods()
    assert all(REPOSITORY_KEY not in md for _, md in recorder.calls)
    cluster_client = Client(cluster.address, "team")
    # the cluster cached the result under the client's own action digest
    cached = await cluster_client.in_thread(cluster_client.get_result, action.digest)
    assert cached is not None and cached.exit_code == 0
