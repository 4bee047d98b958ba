"""`lre logs [-f]` as a user runs it."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.cli.running_lre import bazel_repo, detached, private_home


def test_no_log_is_said_plainly(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    result = home.run("logs", cwd=tmp_path)
    assert result.returncode == 1
    assert f"no lre log at {home.state_dir / 'lre.log'}" in result.stderr
    assert "Traceback" not in result.stderr


def test_prints_the_log_of_the_detached_lre(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    with detached(home, repo):
        whole = home.run("logs", cwd=repo)
        assert whole.returncode == 0, whole.stderr
        assert f"lre listening on 127.0.0.1:{home.grpc_port}" in whole.stdout
        last = home.run("logs", "-n", "1", cwd=repo)
        assert last.returncode == 0, last.stderr
        assert last.stdout == whole.stdout.splitlines(keepends=True)[-1]


class _Lines:
    """The stdout lines of a running process, read in a thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        assert process.stdout is not None
        stream = process.stdout
        threading.Thread(target=lambda: [self._queue.put(ln) for ln in stream], daemon=True).start()

    def wait_for(self, text: str, timeout: float = 30) -> list[str]:
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                seen.append(self._queue.get(timeout=0.2))
            except queue.Empty:
                continue
            if text in seen[-1]:
                return seen
        raise AssertionError(f"{text!r} did not appear; saw {seen}")


def test_follow_goes_on_across_rotation_and_truncation_and_ends_on_ctrl_c(
    tmp_path: Path,
) -> None:
    home = private_home(tmp_path)
    home.state_dir.mkdir(parents=True)
    log = home.state_dir / "lre.log"
    log.write_text("old line\n")
    with subprocess.Popen(
        [sys.executable, "-m", "lre", "logs", "-f", "--config", str(home.config)],
        cwd=tmp_path,
        env=home.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    ) as process:
        try:
            lines = _Lines(process)
            assert lines.wait_for("old line") == ["old line\n"]
            with log.open("a") as f:
                f.write("appended\n")
            assert lines.wait_for("appended") == ["appended\n"]
            # Rotation as logging's RotatingFileHandler does it: rename, new file.
            with log.open("a") as f:
                f.write("last of the old file\n")
            log.rename(log.with_name("lre.log.1"))
            time.sleep(0.5)  # the follower sees no file for a moment
            log.write_text("first of the new file\n")
            assert lines.wait_for("first of the new file") == [
                "last of the old file\n",
                "first of the new file\n",
            ]
            log.write_text("after truncation\n")  # shorter than what was read: start over
            assert lines.wait_for("after truncation") == ["after truncation\n"]
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=90) == 0
        finally:
            if process.poll() is None:
                process.kill()
        assert process.stderr is not None
        assert "Traceback" not in process.stderr.read()


def test_logs_of_a_foreground_lre_are_that_servers(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    home.state_dir.mkdir(parents=True)
    (home.state_dir / "lre.log").write_text("2020-01-01T00:00:00.000Z INFO lre an older lre\n")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lre",
            "up",
            "--no-tui",
            "--config",
            str(home.config),
            "--port",
            str(home.grpc_port),
        ],
        cwd=repo,
        env=home.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while home.run("status", cwd=repo).returncode != 0:
            assert server.poll() is None and time.monotonic() < deadline, "lre did not start"
            time.sleep(0.2)
        shown = home.run("logs", cwd=repo)
        assert shown.returncode == 0, shown.stderr
        assert f"listening on 127.0.0.1:{home.grpc_port}" in shown.stdout, shown.stdout
        recent = home.run("logs", "--since", "1h", cwd=repo)
        assert "an older lre" not in recent.stdout
        assert f"listening on 127.0.0.1:{home.grpc_port}" in recent.stdout
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=60)
    assert server.returncode == 0, err
    assert f"listening on 127.0.0.1:{home.grpc_port}" in err  # the terminal still gets it


def test_tail_and_since(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    home.state_dir.mkdir(parents=True)
    (home.state_dir / "lre.log").write_text(
        "2026-01-01T08:00:00.000Z INFO lre one\n"
        "2026-01-01T09:00:00.000Z ERROR lre two\n"
        "Traceback (most recent call last): part of two\n"
        "2026-01-01T10:00:00.000Z INFO lre three\n"
    )
    tail = home.run("logs", "--tail", "2", cwd=tmp_path)
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.splitlines() == [
        "Traceback (most recent call last): part of two",
        "2026-01-01T10:00:00.000Z INFO lre three",
    ]
    since = home.run("logs", "--since", "2026-01-01T09:00:00+00:00", cwd=tmp_path)
    assert since.returncode == 0, since.stderr
    assert [ln.split()[-1] for ln in since.stdout.splitlines()] == ["two", "two", "three"]
    both = home.run("logs", "--since", "2026-01-01T09:00Z", "-n", "1", cwd=tmp_path)
    assert both.stdout.split()[-1] == "three"
    assert home.run("logs", "--since", "100000d", cwd=tmp_path).stdout.count("\n") == 4
    bad = home.run("logs", "--since", "yesterday", cwd=tmp_path)
    assert bad.returncode == 2
    assert "'yesterday' is neither a duration" in bad.stderr
