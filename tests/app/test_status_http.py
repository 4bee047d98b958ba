"""The status listener over a real socket on 127.0.0.1."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from lre.app._health import HealthBoard
from lre.app._snapshot import SnapshotAssembler
from lre.app._status_http import StatusServer, parse_listen_address
from lre.service import RpcMetrics
from lre.snapshot import EventKind, ProcessSnapshot
from lre.tui import RemoteSnapshots, fetch_snapshot_json
from tests.tui._load import run, start_load, submit


async def request(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` and read the whole answer (the server closes after one)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(raw)
        data = bytearray()
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert int(headers["content-length"]) == len(body) or raw.startswith(b"HEAD")
    return status, headers, body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


async def start(
    nursery: trio.Nursery, source: SnapshotAssembler, **kwargs: object
) -> tuple[StatusServer, int]:
    server = StatusServer("127.0.0.1:0", source, **kwargs)  # type: ignore[arg-type]
    port: int = await nursery.start(server.serve)
    return server, port


async def test_status_ok_then_503_with_reason(nursery: trio.Nursery) -> None:
    health = HealthBoard()
    source = SnapshotAssembler(address="127.0.0.1:50051", health=health)
    source.containment = "pidns"
    server, port = await start(nursery, source)
    assert server.bound_address == f"127.0.0.1:{port}"

    status, headers, body = await request(port, get("/status"))
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["status"] == "ok"
    assert json.loads(body)["containment"] == "pidns"

    health.report("worker:local", "failed to start: work directory is locked")
    status, _, body = await request(port, get("/status?verbose=1"))
    assert status == 503
    assert json.loads(body) == {
        "status": "unavailable",
        "problems": ["worker:local: failed to start: work directory is locked"],
        "queue": {"by_platform": {}, "builds": [], "next": []},
        "builds": [],
        "containment": "pidns",
        "protections_missing": [],
        "upstreams": [],
        "cache": [],
        "memory": {
            "short": [],
            "available_bytes": None,
            "frozen_now": [],
            "frozen": 0,
            "thawed": 0,
            "killed": 0,
            "retried": 0,
            "workers": [],
        },
    }
    health.clear("worker:local")
    health.add_check("disk", lambda: "disk nearly full: 0 bytes free")
    status, _, body = await request(port, get("/status"))
    assert status == 503 and b"disk nearly full" in body


async def test_status_names_the_protections_lre_cannot_give(nursery: trio.Nursery) -> None:
    source = SnapshotAssembler(address="127.0.0.1:50051", health=HealthBoard())
    source.containment = "portable"
    missing = ("local: a PID namespace per action", "because user.max_user_namespaces = 0")
    _, port = await start(nursery, source, protections_missing=missing)
    status, _, body = await request(port, get("/status"))
    assert status == 200
    assert json.loads(body)["protections_missing"] == list(missing)


async def test_metrics_and_stats_during_real_scheduling(nursery: trio.Nursery) -> None:
    load = await start_load(nursery)
    await submit(load, 30)
    await run(load, 20, hold=2)
    load.assembler.events.add(EventKind.KILL, "over its line", peak_rss_bytes=123)
    rpc = RpcMetrics()
    rpc.record("Execution/Execute", "OK", 0.2)
    _, port = await start(nursery, load.assembler, rpc=rpc.statistics)

    status, headers, body = await request(port, get("/metrics"))
    assert status == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }
    assert samples[("lre_submitted_total", ())] == 30
    assert samples[("lre_running_actions", (("worker", "local"),))] == 2
    assert samples[("lre_operations", (("stage", "QUEUED"),))] == 8
    assert samples[("lre_events_total", (("kind", "kill"),))] == 1
    assert (
        samples[("lre_rpc_requests_total", (("code", "OK"), ("method", "Execution/Execute")))] == 1
    )

    status, headers, body = await request(port, get("/api/v1/stats"))
    assert status == 200 and headers["content-type"] == "application/json"
    snapshot = ProcessSnapshot.loads(body)
    assert snapshot.submitted == 30
    assert snapshot.completed == 20
    assert [a.summary for a in snapshot.inflight] != []
    assert {a.summary for a in snapshot.inflight} <= {f"Mnemonic{n}" for n in range(30)}
    assert snapshot.events[0].kind is EventKind.KILL and snapshot.events[0].peak_rss_bytes == 123

    # what lre top does: the same document through the TUI's client
    remote = RemoteSnapshots(f"127.0.0.1:{port}")
    fetched = await remote()
    assert fetched.submitted == 30 and fetched.running == 2
    data = await trio.to_thread.run_sync(lambda: fetch_snapshot_json(f"http://127.0.0.1:{port}"))
    assert data["schema"] == 1


async def test_bad_requests_are_answered_and_logged_once(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    source = SnapshotAssembler(address="a")
    _, port = await start(nursery, source, max_request_bytes=1024)
    caplog.set_level(logging.INFO, logger="lre.status")

    assert (await request(port, get("/nope")))[0] == 404
    assert (await request(port, b"POST /status HTTP/1.1\r\n\r\n"))[0] == 405
    assert (await request(port, b"hello there\r\n\r\n"))[0] == 400
    assert (await request(port, b"GET /status HTTP/1.1\r\nX: " + b"a" * 5000 + b"\r\n\r\n"))[
        0
    ] == 431
    assert (await request(port, b"GET /st\xffatus HTTP/1.1\r\n\r\n"))[0] == 400
    status, headers, body = await request(port, b"HEAD /status HTTP/1.1\r\n\r\n")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0

    rejected = [r for r in caplog.records if r.getMessage() == "rejected HTTP request"]
    assert [r.kv["status"] for r in rejected] == ["404", "405", "400", "431", "400"]  # type: ignore[attr-defined]
    assert all(r.exc_info is None for r in rejected)


async def test_slow_client_times_out_and_limit_answers_503(nursery: trio.Nursery) -> None:
    source = SnapshotAssembler(address="a")
    _, port = await start(nursery, source, request_timeout_s=0.3, max_connections=1)
    slow = await trio.open_tcp_stream("127.0.0.1", port)
    async with slow:
        await slow.send_all(b"GET /status HT")
        await trio.sleep(0.05)
        # the slow one holds the only slot: a second client is turned away at once
        status, _, body = await request(port, get("/status"))
        assert status == 503 and body == b"too many connections\n"
        data = bytearray()
        with trio.fail_after(5):
            while chunk := await slow.receive_some(4096):
                data += chunk
        assert data.startswith(b"HTTP/1.1 408 ")
    assert (await request(port, get("/status")))[0] == 200


async def test_broken_source_gives_500(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> ProcessSnapshot:
        raise RuntimeError("bug")

    server = StatusServer("127.0.0.1:0", broken)
    port = await nursery.start(server.serve)
    status, _, body = await request(port, get("/api/v1/stats"))
    assert status == 500 and b"bug" not in body
    assert any(r.exc_info for r in caplog.records if r.name == "lre.status")


async def test_unreachable_and_bad_addresses() -> None:
    with pytest.raises(ValueError, match=r"global\.status\.address"):
        parse_listen_address("localhost")
    assert parse_listen_address("[::1]:9") == ("::1", 9)
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()  # nothing listens there now
    with pytest.raises(OSError, match=f"cannot reach lre at 127.0.0.1:{port}"):
        await RemoteSnapshots(f"127.0.0.1:{port}")()
    with pytest.raises(ValueError, match="--address"):
        RemoteSnapshots("nowhere")


async def test_port_in_use_names_the_setting(nursery: trio.Nursery) -> None:
    _, port = await start(nursery, SnapshotAssembler(address="a"))
    with pytest.raises(OSError, match=r"global\.status\.address"):
        await nursery.start(StatusServer(f"127.0.0.1:{port}", SnapshotAssembler(address="a")).serve)


async def test_status_lists_the_next_queued_targets_and_what_they_wait_for(
    nursery: trio.Nursery,
) -> None:
    load = await start_load(nursery, cpus=2)
    # cpu_count 1, 2, 3, 1, 2, 3 on a 2-CPU worker: the 3-CPU ones can never run,
    # the 1-CPU ones run, the 2-CPU ones wait for CPU
    await submit(load, 6)
    await run(load, 0, hold=2)
    with trio.move_on_after(0.2):  # nothing fits now: the queue notes why each waits
        await load.scheduler.lease(load.worker)
    load.assembler.events.add(EventKind.KILL, "killed", summary="Mnemonic0", target="//pkg0:target")
    _, port = await start(nursery, load.assembler)
    status, _, body = await request(port, get("/status"))
    assert status == 200
    queue = json.loads(body)["queue"]
    assert queue["by_platform"] == {"OSFamily=linux": 2}
    assert [q["target"] for q in queue["next"]] == ["//pkg1:target", "//pkg4:target"]
    first = queue["next"][0]
    assert first["target"] == "//pkg1:target" and first["mnemonic"] == "Mnemonic1"
    assert first["waiting_for"] == "cpu" and first["waits_for"] == "CPU slots"
    assert first["platform"] == "OSFamily=linux"
    _, _, stats = await request(port, get("/api/v1/stats"))
    (event,) = json.loads(stats)["events"]
    assert event["target"] == "//pkg0:target"
    assert ProcessSnapshot.loads(stats).queued_next[0].target == "//pkg1:target"


async def test_status_says_when_a_store_overruns_for_the_cache_contract(
    nursery: trio.Nursery,
) -> None:
    from lre.cas import StoreStatistics

    overrun = StoreStatistics(
        blob_count=3,
        stored_bytes=5000,
        max_bytes=3000,
        pinned_blobs=0,
        evicted_blobs=0,
        evicted_bytes=0,
        overrun_bytes=2000,
        min_free_bytes=1 << 30,
        keep_told_s=10800,
    )
    source = SnapshotAssembler(
        address="127.0.0.1:50051", health=HealthBoard(), stores=lambda: {"cas": overrun}
    )
    _, port = await start(nursery, source)
    status, _, body = await request(port, get("/status"))
    assert status == 200  # the contract at work is not a fault
    (notice,) = json.loads(body)["cache"]
    assert "store cas holds 2000 bytes beyond its max_bytes of 3000" in notice
    assert "10800 s" in notice and str(1 << 30) in notice


def post(path: str, token: str = "") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Length: 0\r\n\r\n".encode()


async def test_cache_gc_through_the_listener_needs_the_admin_token(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    from lre.app import CacheAdmin
    from lre.app._cache_admin import write_admin_token
    from lre.cas import FilesystemStore
    from lre.cas._blob_io import write_bytes

    store = FilesystemStore(tmp_path / "cas", tmp_path / "tmp", 1 << 20, keep_told_s=10800)
    await store.open()
    told = await write_bytes(store, b"told to a client")
    token = write_admin_token(str(tmp_path))
    assert (tmp_path / "admin.token").read_text().strip() == token
    assert (tmp_path / "admin.token").stat().st_mode & 0o777 == 0o600
    source = SnapshotAssembler(address="127.0.0.1:50051", health=HealthBoard())
    admin = CacheAdmin(blob_stores={"cas": store}, action_caches={})
    _, port = await start(nursery, source, admin=admin, admin_token=token)

    for refused in (post("/api/v1/cache/gc?to=0"), post("/api/v1/cache/gc?to=0", "wrong")):
        assert (await request(port, refused))[0] == 401
    status, _, body = await request(port, post("/api/v1/cache/gc?to=lots", token))
    assert status == 400 and b"to: 'lots'" in body
    status, _, body = await request(port, post("/api/v1/cache/gc?to=0", token))
    assert status == 200
    (row,) = json.loads(body)["stores"]
    assert (row["evicted_blobs"], row["kept_told_bytes"]) == (0, told.size_bytes)
    assert await store.has_many([told]) == [told.size_bytes]
    status, _, body = await request(port, post("/api/v1/cache/gc?to=0&force=1", token))
    assert status == 200 and json.loads(body)["stores"][0]["evicted_blobs"] == 1
    assert await store.has_many([told]) == [None]


async def test_status_shows_the_memory_control(nursery: trio.Nursery) -> None:
    from lre.snapshot import MemoryControlRow

    source = SnapshotAssembler(address="127.0.0.1:50051", health=HealthBoard())
    row = MemoryControlRow(
        worker="local",
        frozen_now=1,
        frozen=3,
        thawed=2,
        killed=1,
        short_reason="host MemAvailable 900 MiB is under the headroom of 2048 MiB",
        available_bytes=900 << 20,
        pressure_full_avg10=0.5,
        frozen_leases=("local/7",),
        sampling="psi trigger: some 100000 2000000 (/proc/pressure/memory)",
        pressure_events=4,
    )
    source.memory_control = lambda: (row,)
    _, port = await start(nursery, source)
    status, _, body = await request(port, get("/status"))
    assert status == 200
    memory = json.loads(body)["memory"]
    assert (memory["frozen"], memory["thawed"], memory["killed"]) == (3, 2, 1)
    assert memory["short"] == ["local: host MemAvailable 900 MiB is under the headroom of 2048 MiB"]
    assert memory["available_bytes"] == 900 << 20
    (worker,) = memory["workers"]
    assert worker["sampling"] == "psi trigger: some 100000 2000000 (/proc/pressure/memory)"
    assert worker["pressure_events"] == 4
    _, _, stats = await request(port, get("/api/v1/stats"))
    (again,) = ProcessSnapshot.loads(stats).memory_control
    assert again == row


def test_status_lists_each_active_build_with_its_share() -> None:
    from lre.app._status_http import _queue
    from lre.snapshot import BuildShareRow

    row = BuildShareRow("inv-1", "app", "bazel 4.2.3", 2.0, 2 / 3, 0.5, 1, 7)
    snapshot = ProcessSnapshot(taken_at=0.0, started_at=0.0, address="a", build_shares=(row,))
    assert _queue(snapshot)["builds"] == [
        {
            "invocation": "inv-1",
            "repository": "app",
            "tool": "bazel 4.2.3",
            "weight": 2.0,
            "fair_share": 0.667,
            "used_share": 0.5,
            "running": 1,
            "queued": 7,
        }
    ]
