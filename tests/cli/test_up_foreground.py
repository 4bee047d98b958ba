"""A foreground ``lre up`` on a real terminal (a pty): ``q``, a closed terminal, SIGHUP.

What a user sees: the dashboard on the terminal with what ``lre up`` wrote
kept on top of it; ``q`` stops lre as Ctrl-C does; closing the terminal
(the kernel's SIGHUP) stops it cleanly too, leaving every repository
building locally.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.cli._lre import bazel_repo_with_config, run_lre
from tests.cli._terminal import Terminal, start_on_terminal


@contextmanager
def foreground_lre(
    tmp_path: Path, *args: str
) -> Iterator[tuple[Terminal, Path, Path, dict[str, str]]]:
    """``lre up ARGS`` in a new Bazel repository, its stdin/stdout/stderr a pty
    that is its controlling terminal; waits until it is ready."""
    repo, config, env = bazel_repo_with_config(tmp_path)
    env = {**env, "TERM": "xterm", "COLUMNS": "120", "LINES": "40"}
    terminal, reader = start_on_terminal(
        [sys.executable, "-m", "lre", "up", "--config", str(config), *args], cwd=repo, env=env
    )
    process, master = terminal.process, terminal.master
    try:
        deadline = time.monotonic() + 90
        while run_lre("status", "--config", str(config), cwd=repo, env=env).returncode != 0:
            assert process.poll() is None, terminal.output
            assert time.monotonic() < deadline, "lre did not start:\n" + terminal.output
            time.sleep(0.3)
        yield terminal, repo, config, env
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        try:
            os.close(master)
        except OSError:
            pass
        reader.join(10)


def _wait_for(process: subprocess.Popen[bytes], what: str, output: Terminal) -> int:
    try:
        return process.wait(60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"lre did not stop after {what}:\n{output.output[-3000:]}") from None


def test_q_stops_lre_and_the_notes_show_on_the_dashboard(tmp_path: Path) -> None:
    with foreground_lre(tmp_path) as (terminal, repo, config, env):
        deadline = time.monotonic() + 30
        # The dashboard took the screen (alternate screen) and shows what lre wrote.
        while True:
            screen = terminal.output.rpartition("\x1b[?1049h")[2]
            if f"wrote {repo / 'lre.bazelrc'}" in screen:
                break
            assert time.monotonic() < deadline, terminal.output[-3000:]
            time.sleep(0.3)
        assert "--remote_executor=grpc://" in (repo / "lre.bazelrc").read_text()
        os.write(terminal.master, b"q")
        code = _wait_for(terminal.process, "q", terminal)
        assert code == 0, terminal.output[-3000:]
        time.sleep(0.5)  # the reader thread catches up
        after = terminal.output.rpartition("\x1b[?1049l")[2]
        assert f"{repo}: builds locally now" in after, after
        assert terminal.output.count(f"wrote {repo / 'lre.bazelrc'}") >= 1
    assert "--remote_executor" not in (repo / "lre.bazelrc").read_text()
    assert run_lre("status", "--config", str(config), cwd=repo, env=env).returncode != 0


def test_closing_the_terminal_stops_lre_cleanly(tmp_path: Path) -> None:
    with foreground_lre(tmp_path) as (terminal, repo, _config, _env):
        os.close(terminal.master)  # the terminal window closed: the kernel sends SIGHUP
        code = _wait_for(terminal.process, "the terminal closed", terminal)
        assert code == 0, terminal.output[-3000:]
    assert "--remote_executor" not in (repo / "lre.bazelrc").read_text()
    assert not (tmp_path / "lre-root" / "state" / "lre.json").exists()


def test_sighup_of_a_plain_foreground_lre_stops_it_cleanly(tmp_path: Path) -> None:
    repo, config, env = bazel_repo_with_config(tmp_path)
    server = subprocess.Popen(
        [sys.executable, "-m", "lre", "up", "--no-tui", "--config", str(config)],
        cwd=repo,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while run_lre("status", "--config", str(config), cwd=repo, env=env).returncode != 0:
            assert server.poll() is None and time.monotonic() < deadline, "lre did not start"
            time.sleep(0.2)
    finally:
        server.send_signal(signal.SIGHUP)
        output, _ = server.communicate(timeout=60)
    assert server.returncode == 0, output
    assert "SIGHUP received, shutting down" in output
    assert f"{repo}: builds locally now" in output
    assert "--remote_executor" not in (repo / "lre.bazelrc").read_text()
