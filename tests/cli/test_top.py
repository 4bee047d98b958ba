"""``lre top`` on a real terminal (a pty) attached to a detached lre that then stops."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from tests.cli._terminal import start_on_terminal
from tests.cli.running_lre import bazel_repo, private_home


def test_top_says_lre_is_not_running_once_it_stopped(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    started = home.run("up", "--detach", "--port", str(home.grpc_port), cwd=repo)
    assert started.returncode == 0, started.stderr
    env = {**home.env, "TERM": "xterm", "COLUMNS": "120", "LINES": "40"}
    terminal, reader = start_on_terminal(
        [sys.executable, "-m", "lre", "top", "--config", str(home.config)], cwd=repo, env=env
    )
    try:
        deadline = time.monotonic() + 60
        while "● ok" not in terminal.output:
            assert terminal.process.poll() is None, terminal.output
            assert time.monotonic() < deadline, terminal.output[-3000:]
            time.sleep(0.3)
        seen = len(terminal.output)
        down = home.run("down", cwd=repo)
        assert down.returncode == 0, down.stderr
        while "lre is not running" not in terminal.output[seen:]:
            assert time.monotonic() < deadline + 60, terminal.output[-3000:]
            time.sleep(0.3)
        time.sleep(1)  # a few more refreshes
        after = terminal.output[seen:]
        # What stays on screen (frames are redrawn only when they change): lre
        # is not running, not a raw connection error, not "ok" nor "UNHEALTHY".
        last = after.rindex("lre is not running")
        assert after.rfind("Errno") < last and after.rfind("Connection refused") < last, after
        assert after.rfind("● not answering") > max(after.rfind("● ok"), after.rfind("UNHEALTHY"))
    finally:
        if terminal.process.poll() is None:
            terminal.process.send_signal(signal.SIGINT)
            terminal.process.wait(30)
        reader.join(10)
        home.run("down", cwd=repo)
