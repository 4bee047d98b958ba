"""`lre stats` and `lre top` against a real status listener."""

from __future__ import annotations

import json

import trio
from typer.testing import CliRunner

import lre.cli._top  # noqa: F401  (registers the commands even before lre.cli imports it)
from lre.app._status_http import StatusServer
from lre.cli._app import app
from lre.snapshot import ProcessSnapshot
from tests.tui._sample import sample_snapshot


async def serve_sample(nursery: trio.Nursery) -> str:
    server = StatusServer("127.0.0.1:0", sample_snapshot)
    port = await nursery.start(server.serve)
    return f"127.0.0.1:{port}"


async def test_stats_json_prints_the_snapshot(nursery: trio.Nursery) -> None:
    address = await serve_sample(nursery)
    result = await trio.to_thread.run_sync(
        lambda: CliRunner().invoke(app, ["stats", "--json", "--address", address])
    )
    assert result.exit_code == 0, result.output
    assert ProcessSnapshot.from_json(json.loads(result.stdout)) == sample_snapshot()


async def test_stats_text_and_unreachable(nursery: trio.Nursery) -> None:
    address = await serve_sample(nursery)
    result = await trio.to_thread.run_sync(
        lambda: CliRunner().invoke(app, ["stats", "--address", address])
    )
    assert result.exit_code == 0
    assert "In flight (5)" in result.stdout and "CppLink" in result.stdout

    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()
    result = await trio.to_thread.run_sync(
        lambda: CliRunner().invoke(app, ["stats", "--json", "--address", f"127.0.0.1:{port}"])
    )
    assert result.exit_code == 1
    assert f"cannot reach lre at 127.0.0.1:{port}" in result.stderr


def test_top_refuses_without_a_terminal() -> None:
    result = CliRunner().invoke(app, ["top", "--address", "127.0.0.1:9"])
    assert result.exit_code == 2
    assert "needs a terminal" in result.stderr
