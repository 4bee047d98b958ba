"""``lre up --detach`` / ``status`` / ``down`` / ``unlink`` as a user runs them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil

from tests.app.conftest import app_config_text


def _lre(
    *args: str, cwd: Path, env: dict[str, str], timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lre", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_detach_status_down_and_client_config(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "WORKSPACE").write_text("")
    (repo / ".bazelrc").write_text("build --verbose_failures\n")
    config = tmp_path / "lre.json5"
    config.write_text(app_config_text(tmp_path / "lre-root"))
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    port = _free_port()

    started = _lre(
        "up", "--detach", "--config", str(config), "--port", str(port), cwd=repo / "pkg", env=env
    )
    assert started.returncode == 0, started.stderr
    assert f"127.0.0.1:{port}" in started.stdout
    try:
        rc = (repo / "lre.bazelrc").read_text()
        assert f"--remote_executor=grpc://127.0.0.1:{port}" in rc
        assert "try-import %workspace%/lre.bazelrc" in (repo / ".bazelrc").read_text()

        status = _lre("status", "--config", str(config), cwd=repo, env=env)
        assert status.returncode == 0, status.stdout + status.stderr
        assert f"127.0.0.1:{port}" in status.stdout

        again = _lre(
            "up", "--detach", "--config", str(config), "--port", str(port), cwd=repo, env=env
        )
        assert again.returncode == 1
        assert "already running" in again.stderr
    finally:
        down = _lre("down", "--config", str(config), cwd=repo, env=env)
    assert down.returncode == 0, down.stderr
    assert "stopped" in down.stdout
    assert _lre("status", "--config", str(config), cwd=repo, env=env).returncode == 1
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        assert str(config) not in cmdline, f"lre still running: {proc.pid}"

    unlinked = _lre("unlink", "--repo", str(repo), cwd=tmp_path, env=env)
    assert unlinked.returncode == 0, unlinked.stderr
    assert not (repo / "lre.bazelrc").exists()
    assert (repo / ".bazelrc").read_text() == "build --verbose_failures\n"


def test_port_in_use_names_the_holder(tmp_path: Path) -> None:
    config = tmp_path / "lre.json5"
    config.write_text(app_config_text(tmp_path / "lre-root"))
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = _lre(
            "up",
            "--no-tui",
            "--no-client-config",
            "--config",
            str(config),
            "--port",
            str(port),
            cwd=tmp_path,
            env=env,
        )
    assert result.returncode == 1
    assert f"127.0.0.1:{port} is in use by pid {os.getpid()}" in result.stderr
    assert "--port" in result.stderr


def test_start_up_errors_are_one_line_not_a_traceback(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("")  # empty: refused at start
    token.chmod(0o600)
    config = tmp_path / "lre.json5"
    config.write_text(
        app_config_text(tmp_path / "lre-root").replace(
            'listener: { address: "127.0.0.1:0" }',
            f'listener: {{ address: "127.0.0.1:0", auth_token_file: "{token}" }}',
        )
    )
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    result = _lre(
        "up", "--no-tui", "--no-client-config", "--config", str(config), cwd=tmp_path, env=env
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: lre could not start:")
    assert "auth_token_file" in result.stderr
    assert "Traceback" not in result.stderr


def test_detach_returns_once_the_client_config_is_written(tmp_path: Path) -> None:
    # A build started right after `lre up --detach` must find lre.bazelrc:
    # Bazel's try-import skips a missing file without a word. A slow `bazel
    # --version` (lre asks it which flags to write) widens the window in
    # which the pid file could exist before the client config.
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "MODULE.bazel").write_text("")
    tools = tmp_path / "bin"
    tools.mkdir()
    fake_bazel = tools / "bazel"
    fake_bazel.write_text("#!/bin/sh\nsleep 2\necho 'bazel 7.1.0'\n")
    fake_bazel.chmod(0o755)
    config = tmp_path / "lre.json5"
    config.write_text(app_config_text(tmp_path / "lre-root"))
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    port = _free_port()
    started = _lre(
        "up", "--detach", "--config", str(config), "--port", str(port), cwd=repo, env=env
    )
    try:
        assert started.returncode == 0, started.stderr
        rc = (repo / "lre.bazelrc").read_text()
        assert f"--remote_executor=grpc://127.0.0.1:{port}" in rc
        assert "--remote_download_toplevel" in rc  # written for the Bazel 7 that answered
    finally:
        down = _lre("down", "--config", str(config), cwd=repo, env=env)
    assert down.returncode == 0, down.stderr
