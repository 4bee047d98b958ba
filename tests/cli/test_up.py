"""``lre up --detach`` / ``status`` / ``down`` / ``unlink`` as a user runs them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests._support.configs import app_config_text
from tests._support.servers import free_port
from tests.cli._lre import bazel_repo_with_config, run_lre
from tests.service.test_auth import make_ca, make_cert


def test_detach_status_down_and_client_config(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "WORKSPACE").write_text("")
    (repo / ".bazelrc").write_text("build --verbose_failures\n")
    config = tmp_path / "lre.json5"
    config.write_text(app_config_text(tmp_path / "lre-root"))
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    port = free_port()

    started = run_lre(
        "up", "--detach", "--config", str(config), "--port", str(port), cwd=repo / "pkg", env=env
    )
    assert started.returncode == 0, started.stderr
    assert f"127.0.0.1:{port}" in started.stdout
    try:
        rc = (repo / "lre.bazelrc").read_text()
        assert f"--remote_executor=grpc://127.0.0.1:{port}" in rc
        assert "try-import %workspace%/lre.bazelrc" in (repo / ".bazelrc").read_text()

        status = run_lre("status", "--config", str(config), cwd=repo, env=env)
        assert status.returncode == 0, status.stdout + status.stderr
        assert f"127.0.0.1:{port}" in status.stdout

        again = run_lre(
            "up", "--detach", "--config", str(config), "--port", str(port), cwd=repo, env=env
        )
        assert again.returncode == 0, again.stderr
        assert "already running" in again.stdout
    finally:
        down = run_lre("down", "--config", str(config), cwd=repo, env=env)
    assert down.returncode == 0, down.stderr
    assert "stopped" in down.stdout
    assert run_lre("status", "--config", str(config), cwd=repo, env=env).returncode == 3
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        assert str(config) not in cmdline, f"lre still running: {proc.pid}"

    unlinked = run_lre("unlink", "--repo", str(repo), cwd=tmp_path, env=env)
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
        result = run_lre(
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


@pytest.mark.parametrize("mode", ["--no-tui", "--detach"])
def test_start_up_errors_are_one_line_not_a_traceback(tmp_path: Path, mode: str) -> None:
    # With --detach the error comes from the background lre's output.
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
    result = run_lre(
        "up", mode, "--no-client-config", "--config", str(config), cwd=tmp_path, env=env
    )
    assert result.returncode == 1
    assert "error: lre could not start:" in result.stderr
    if mode == "--no-tui":
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
    port = free_port()
    started = run_lre(
        "up", "--detach", "--config", str(config), "--port", str(port), cwd=repo, env=env
    )
    try:
        assert started.returncode == 0, started.stderr
        rc = (repo / "lre.bazelrc").read_text()
        assert f"--remote_executor=grpc://127.0.0.1:{port}" in rc
        # written for the Bazel 7 that answered
        assert "--experimental_remote_cache_eviction_retries=5" in rc
    finally:
        down = run_lre("down", "--config", str(config), cwd=repo, env=env)
    assert down.returncode == 0, down.stderr


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, timeout=60
    )
    return out.stdout


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as reply:
        status: int = reply.status
        return status


def test_second_repo_link_down_makes_all_inert_and_up_restores(tmp_path: Path) -> None:
    first, second, third = (tmp_path / name for name in ("first", "second", "third"))
    for repo in (first, second, third):
        repo.mkdir()
        (repo / "WORKSPACE").write_text("")
    _git(first, "init", "-q")
    (first / ".bazelrc").write_text("build --verbose_failures\n")
    config = tmp_path / "lre.json5"
    config.write_text(app_config_text(tmp_path / "lre-root", status_port=free_port()))
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    port = free_port()

    def executor(repo: Path) -> str:
        lines = (repo / "lre.bazelrc").read_text().splitlines()
        return next((ln for ln in lines if "--remote_executor=" in ln), "")

    started = run_lre(
        "up", "--detach", "--config", str(config), "--port", str(port), cwd=first, env=env
    )
    try:
        assert started.returncode == 0, started.stderr
        # --detach prints what `up` did to the repository before it returns.
        assert f"wrote {first / 'lre.bazelrc'}" in started.stdout
        assert "info/exclude" in started.stdout
        if os.geteuid() == 0:  # the server's start-up warnings reach the terminal too
            assert "note: running as root" in started.stderr
        assert "lre.bazelrc" not in _git(first, "status", "--porcelain", "--untracked-files=all")

        status = run_lre("status", "--config", str(config), cwd=first, env=env)
        assert status.returncode == 0, status.stdout + status.stderr
        urls = {
            line.split()[0].rstrip(":"): line.split()[1]
            for line in status.stdout.splitlines()
            if line.strip().startswith(("status:", "metrics:"))
        }
        assert urls["status"].endswith("/status") and urls["metrics"].endswith("/metrics")
        assert _get(urls["status"]) == 200 and _get(urls["metrics"]) == 200
        assert f"status on {urls['status']}" in started.stdout

        again = run_lre("up", "--config", str(config), cwd=second, env=env)
        assert again.returncode == 0, again.stderr
        assert "already running" in again.stdout
        assert f"grpc://127.0.0.1:{port}" in executor(second)

        linked = run_lre(
            "link", "--config", str(config), "--repo", str(third), cwd=tmp_path, env=env
        )
        assert linked.returncode == 0, linked.stderr
        assert f"grpc://127.0.0.1:{port}" in executor(third)
    finally:
        down = run_lre("down", "--config", str(config), cwd=first, env=env)
    assert down.returncode == 0, down.stderr
    for repo in (first, second, third):
        assert f"{repo}: builds locally now" in down.stdout
        assert executor(repo) == ""
        assert "try-import %workspace%/lre.bazelrc" in (repo / ".bazelrc").read_text()

    port2 = free_port()
    restarted = run_lre(
        "up", "--detach", "--config", str(config), "--port", str(port2), cwd=first, env=env
    )
    try:
        assert restarted.returncode == 0, restarted.stderr
        for repo in (first, second, third):
            assert f"grpc://127.0.0.1:{port2}" in executor(repo), repo
        assert f"{second} uses lre again" in restarted.stdout
    finally:
        assert run_lre("down", "--config", str(config), cwd=first, env=env).returncode == 0
    unlinked = run_lre(
        "unlink", "--config", str(config), "--repo", str(first), cwd=tmp_path, env=env
    )
    assert unlinked.returncode == 0, unlinked.stderr
    assert (first / ".bazelrc").read_text() == "build --verbose_failures\n"
    assert "lre" not in (first / ".git" / "info" / "exclude").read_text()


def test_ports_outside_the_range_are_refused_naming_the_field(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    result = run_lre("up", "--no-tui", "--port", "70000", cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert "--port" in result.stderr and "70000" in result.stderr
    config = tmp_path / "lre.json5"
    config.write_text(
        app_config_text(tmp_path / "root", status_port=99999).replace(
            "127.0.0.1:0", "127.0.0.1:70000"
        )
    )
    check = run_lre("config", "check", str(config), cwd=tmp_path, env=env)
    assert check.returncode == 1
    assert "servers[0].listener.address: '127.0.0.1:70000': the port must be 1-65535" in (
        check.stderr
    )
    assert "global.status.address: '127.0.0.1:99999': the port must be 1-65535" in check.stderr


def test_holders_of_both_listeners_are_named_ipv4_mapped_included(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    config = tmp_path / "lre.json5"
    with socket.socket(socket.AF_INET6) as mapped, socket.socket() as status_holder:
        # A dual-stack server (grpc's own) shows its IPv4 socket as ::ffff:127.0.0.1.
        mapped.bind(("::ffff:127.0.0.1", 0))
        mapped.listen()
        port = mapped.getsockname()[1]
        status_holder.bind(("127.0.0.1", 0))
        status_holder.listen()
        status_port = status_holder.getsockname()[1]
        config.write_text(app_config_text(tmp_path / "root", status_port=status_port))
        args = ["up", "--no-tui", "--no-client-config", "--config", str(config)]
        grpc_busy = run_lre(*args, "--port", str(port), cwd=tmp_path, env=env)
        status_busy = run_lre(*args, cwd=tmp_path, env=env)
    holder = f"pid {os.getpid()} ({psutil.Process().name()})"
    assert grpc_busy.returncode == 1
    assert f"servers[0].listener.address 127.0.0.1:{port} is in use by {holder}" in (
        grpc_busy.stderr
    )
    assert status_busy.returncode == 1
    assert f"global.status.address 127.0.0.1:{status_port} is in use by {holder}" in (
        status_busy.stderr
    )
    assert "Traceback" not in grpc_busy.stderr + status_busy.stderr


def test_a_second_lre_with_its_own_state_dir_and_port_starts(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    status_port = free_port()
    configs = []
    for name in ("one", "two"):
        config = tmp_path / f"{name}.json5"
        config.write_text(app_config_text(tmp_path / name, status_port=status_port))
        configs.append(config)
    first = run_lre(
        "up", "--detach", "--no-client-config", "--config", str(configs[0]), cwd=tmp_path, env=env
    )
    try:
        assert first.returncode == 0, first.stderr
        second = run_lre(
            "up", "--detach", "--no-client-config", "--config", str(configs[1]),
            "--port", str(free_port()), cwd=tmp_path, env=env,
        )  # fmt: skip
        try:
            assert second.returncode == 0, second.stderr
            status = run_lre("status", "--config", str(configs[1]), cwd=tmp_path, env=env)
            assert status.returncode == 0, status.stdout
            assert f"127.0.0.1:{status_port}/" not in status.stdout
            stats = run_lre("stats", "--json", "--config", str(configs[1]), cwd=tmp_path, env=env)
            assert stats.returncode == 0, stats.stderr  # found through the pid file
        finally:
            run_lre("down", "--config", str(configs[1]), cwd=tmp_path, env=env)
    finally:
        run_lre("down", "--config", str(configs[0]), cwd=tmp_path, env=env)


def _up_in_bazel_and_buck2_repo(
    tmp_path: Path, listener: str
) -> tuple[Path, Path, dict[str, str], subprocess.CompletedProcess[str]]:
    """``lre up --detach`` in a new Bazel + Buck2 repository, with the test
    config's listener replaced by ``listener``: (repo, config, env, result)."""
    config = tmp_path / "lre.json5"
    config.write_text(
        app_config_text(tmp_path / "lre-root").replace(
            'listener: { address: "127.0.0.1:0" }', listener
        )
    )
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "WORKSPACE").write_text("")
    (repo / ".buckconfig").write_text("[cells]\nroot = .\n")
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    started = run_lre("up", "--detach", "--config", str(config), cwd=repo, env=env)
    return repo, config, env, started


def test_client_config_of_a_tls_listener_with_a_token(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    make_ca(pki, "ca")
    make_cert(pki, "server", "ca", server=True)
    token = tmp_path / "token"
    token.write_text("t0ken-for-lre\n")
    token.chmod(0o600)
    tls = f'tls: {{ cert_file: "{pki}/server.pem", key_file: "{pki}/server.key" }}'
    repo, config, env, started = _up_in_bazel_and_buck2_repo(
        tmp_path, f'listener: {{ address: "127.0.0.1:0", auth_token_file: "{token}", {tls} }}'
    )
    try:
        assert started.returncode == 0, started.stderr
        rc = (repo / "lre.bazelrc").read_text()
        assert "build:lre --remote_executor=grpcs://127.0.0.1:" in rc
        assert f"build:lre --tls_certificate={pki}/server.pem" in rc
        assert 'build:lre --remote_header="authorization=Bearer t0ken-for-lre"' in rc
        assert (repo / "lre.bazelrc").stat().st_mode & 0o777 == 0o600
        buck = (repo / ".buckconfig.d" / "lre.buckconfig").read_text()
        assert "tls = true" in buck and f"tls_ca_certs = {pki}/server.pem" in buck
        assert "http_headers = authorization: Bearer t0ken-for-lre" in buck
        assert "buck2 kill" in started.stderr  # the note reaches the terminal with --detach
        assert "ALPN" in started.stderr  # what Debian's Bazel says to TLS
    finally:
        assert run_lre("down", "--config", str(config), cwd=repo, env=env).returncode == 0


def test_a_foreground_lre_stopped_leaves_the_repo_building_locally(tmp_path: Path) -> None:
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
        assert "--remote_executor=grpc://127.0.0.1:" in (repo / "lre.bazelrc").read_text()
    finally:
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=60)
    assert server.returncode == 0, output
    assert f"{repo}: builds locally now" in output
    assert "--remote_executor" not in (repo / "lre.bazelrc").read_text()


def test_client_config_of_a_unix_socket_listener(tmp_path: Path) -> None:
    socket_path = tmp_path / "lre.sock"
    repo, config, env, started = _up_in_bazel_and_buck2_repo(
        tmp_path, f'listener: {{ address: "unix:{socket_path}" }}'
    )
    try:
        assert started.returncode == 0, started.stderr
        rc = (repo / "lre.bazelrc").read_text()
        assert f"build:lre --remote_executor=unix://{socket_path}" in rc
        assert not (repo / ".buckconfig.d").exists()
        assert "Buck2 cannot reach a Unix socket" in started.stderr
        assert "Unix domain sockets are unsupported" in started.stderr
    finally:
        assert run_lre("down", "--config", str(config), cwd=repo, env=env).returncode == 0
