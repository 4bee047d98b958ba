"""The status listener over a real socket on 127.0.0.1."""

from __future__ import annotations

import json
import logging

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
        "containment": "pidns",
        "protections_missing": [],
        "upstreams": [],
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
