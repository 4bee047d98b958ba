"""``lre up``'s flags for the common knobs, and flags checked at the command line."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from tests._support.servers import free_port
from tests.cli.running_lre import bazel_repo, private_home


def test_cache_cpus_memory_and_status_port_flags(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    status_port = free_port()
    started = home.run(
        "up", "--detach", "--port", str(home.grpc_port), "--status-port", str(status_port),
        "--cache-size", "300MiB", "--cpus", "1", "--memory-budget", "1GiB", cwd=repo,
    )  # fmt: skip
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{status_port}/status", timeout=10) as r:
            assert r.status == 200
        stats = json.loads(home.run("stats", "--json", cwd=repo).stdout)
        assert stats["millicpus_capacity"] == 1500  # 1 CPU x cpu_overcommit 1.5
        assert stats["memory_capacity_bytes"] == 1 << 30
        cache = json.loads(home.run("cache", "--json", cwd=repo).stdout)
        cas = next(s for s in cache["stores"] if s["kind"] == "cas")
        assert cas["max_bytes"] == 300 << 20
    finally:
        assert home.run("down", cwd=repo).returncode == 0


def test_bad_flags_are_refused_before_anything_starts(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    level = home.run("up", "--detach", "--log-level", "verbose", cwd=tmp_path)
    assert level.returncode == 2
    assert "'verbose' is not one of 'debug', 'info', 'warning', 'error'" in level.stderr
    size = home.run("up", "--detach", "--cache-size", "lots", cwd=tmp_path)
    assert size.returncode == 2 and "--cache-size" in size.stderr
    port = str(free_port())
    clash = home.run("up", "--detach", "--port", port, "--status-port", port, cwd=tmp_path)
    assert clash.returncode == 2, clash.stdout + clash.stderr
    assert f"--port and --status-port are both {port}" in clash.stderr
    assert home.run("status", cwd=tmp_path).returncode == 3


def test_port_of_the_status_listener_given_as_grpc_port_moves_it(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    # --port names the port the status listener is configured on (50061 by default).
    started = home.run("up", "--detach", "--port", str(home.status_port), cwd=repo)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        record = json.loads(home.run("status", "--json", cwd=repo).stdout)
        assert record["grpc_address"] == f"127.0.0.1:{home.status_port}"
        assert record["status_address"] != f"127.0.0.1:{home.status_port}"
        assert record["healthy"] is True
    finally:
        assert home.run("down", cwd=repo).returncode == 0


def test_an_lre_moved_aside_with_port_leaves_the_default_status_port(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    text = home.config.read_text()
    home.config.write_text(text.replace(f"127.0.0.1:{home.status_port}", "127.0.0.1:50061"))
    repo = bazel_repo(tmp_path)
    started = home.run("up", "--detach", "--port", str(home.grpc_port), cwd=repo)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        record = json.loads(home.run("status", "--json", cwd=repo).stdout)
        assert record["grpc_address"] == f"127.0.0.1:{home.grpc_port}"
        # The default status port stays free for an lre on the defaults.
        assert record["status_address"] != "127.0.0.1:50061", record["status_address"]
        assert record["healthy"] is True
    finally:
        assert home.run("down", cwd=repo).returncode == 0
