"""`lre top` for real: in a tmux pane (private tmux server), attached over HTTP to a
status listener fed by a real scheduler; `q` leaves it and the listener keeps serving.

Set LRE_CAPTURE_SCREEN=path to save the captured pane (docs/tui-screen.txt).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import trio

from lre.app._status_http import StatusServer
from lre.snapshot import EventKind
from tests.tui._load import run, start_load, submit

REPO = Path(__file__).resolve().parents[2]
TOP = "import lre.cli._top; from lre.cli import main; main()"


async def tmux(socket: Path, *args: str) -> str:
    result = await trio.run_process(
        ["tmux", "-S", str(socket), *args], capture_stdout=True, capture_stderr=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"tmux {args[0]} failed: {result.stderr.decode()}")
    return result.stdout.decode()


@pytest.mark.parametrize("width", [80, 160])
async def test_lre_top_in_tmux(nursery: trio.Nursery, tmp_path: Path, width: int) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux not installed")
    load = await start_load(nursery, cpus=16)
    await submit(load, 40)
    await run(load, 25, hold=6)
    load.assembler.events.add(
        EventKind.KILL, "over its line of 614.4M; requeued at 1.0G", summary="Mnemonic3",
        worker="local", peak_rss_bytes=650 << 20, target="//pkg3:target",
    )  # fmt: skip
    server = StatusServer("127.0.0.1:0", load.assembler)
    port = await nursery.start(server.serve)

    socket = tmp_path / "tmux.sock"
    # a tmux started without a terminal exports COLUMNS=80/LINES=24 to its panes,
    # which rich would obey over the real pane size
    command = f"env -u COLUMNS -u LINES {sys.executable} -c '{TOP}' top --address 127.0.0.1:{port}"
    env_cwd = str(REPO)
    await tmux(socket, "-f", "/dev/null", "new-session", "-d", "-x", str(width), "-y", "40",
               "-c", env_cwd, "-s", "top", command)  # fmt: skip
    try:
        screen = ""
        with trio.fail_after(20):
            while "In flight (6)" not in screen:
                await trio.sleep(0.2)
                screen = await tmux(socket, "capture-pane", "-p", "-t", "top")
        await trio.sleep(0.6)  # a few more refreshes: the screen is redrawn in place
        screen = await tmux(socket, "capture-pane", "-p", "-t", "top")
        lines = screen.splitlines()
        assert lines[0].startswith("╭") and "lre 127.0.0.1:0" in lines[1]
        assert "queued 9  running 6" in screen
        assert "Mnemonic" in screen and "Recent events" in screen
        assert "peak 650M" in screen
        assert all(len(line) <= width for line in lines)
        # one worker: no Worker column; the target is shown at every width
        header = next(line for line in lines if line.startswith("Action"))
        assert header.split()[:3] == ["Action", "Target", "Elapsed"], header
        assert "Worker" not in header
        row = next(line for line in lines if line.startswith("Mnemonic2"))
        assert row.split()[1].startswith("//pkg2")
        # the queue: by platform, with the next targets and what they wait for
        queue = next(line for line in lines if line.startswith("Queued 9: OSFamily=linux 9"))
        after = lines[lines.index(queue) + 1]
        assert after.startswith("//pkg") and ("next in line" in after or "waits for" in after)
        kill = next(line for line in lines if " kill " in line)
        assert "//pkg3:target" in kill and "main/operations" not in kill
        assert "q  quit" in lines[-1] or "q  quit" in screen.rstrip().splitlines()[-1]
        capture = os.environ.get("LRE_CAPTURE_SCREEN")
        if capture:
            await trio.Path(capture).write_text(screen.rstrip("\n") + "\n")

        await tmux(socket, "send-keys", "-t", "top", "q")
        with trio.fail_after(10):
            while True:
                try:
                    await tmux(socket, "has-session", "-t", "top")
                except RuntimeError:
                    break  # the pane's process ended, so did the session
                await trio.sleep(0.1)
    finally:
        with trio.CancelScope(shield=True):
            await trio.run_process(
                ["tmux", "-S", str(socket), "kill-server"], capture_stderr=True, check=False
            )
    # the server was not stopped by leaving top
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /status HTTP/1.1\r\n\r\n")
        assert (await stream.receive_some(100)).startswith(b"HTTP/1.1 200 ")
