"""``lre status``/``ps``/``stop``/``start``/``restart`` as docker compose and LSB users expect."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
from pathlib import Path

import psutil

from lre.cli._daemon import RunningServer, write_pid_file
from tests.cli.running_lre import LreHome, bazel_repo, private_home


def test_status_ps_stop_start_restart(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)

    stopped = home.run("status", cwd=repo)
    assert stopped.returncode == 3, stopped  # LSB: program is not running
    assert stopped.stdout.strip() == "lre is not running"
    assert json.loads(home.run("status", "--json", cwd=repo).stdout)["running"] is False
    empty = home.run("ps", cwd=repo)
    assert empty.returncode == 0 and empty.stdout.split() == [
        "PID", "ADDRESS", "STATUS", "STATE", "RUNNING", "QUEUED", "UP"
    ]  # fmt: skip

    started = home.run("up", "--detach", "--port", str(home.grpc_port), cwd=repo)
    assert started.returncode == 0, started.stderr
    try:
        shown = home.run("status", cwd=repo)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert "{" not in shown.stdout, shown.stdout  # no raw JSON
        assert shown.stdout.startswith("lre is running: healthy\n"), shown.stdout
        assert f"gRPC         127.0.0.1:{home.grpc_port}" in shown.stdout
        assert "actions      0 running, 0 queued" in shown.stdout
        assert f"repositories {repo}" in shown.stdout
        record = json.loads(home.run("status", "--json", cwd=repo).stdout)
        assert record["status"]["status"] == "ok"  # an object, not JSON in a string
        assert record["repositories"] == [str(repo)]
        assert record["healthy"] is True

        rows = json.loads(home.run("ps", "--json", cwd=repo).stdout)
        assert [r["address"] for r in rows] == [f"127.0.0.1:{home.grpc_port}"]
        assert rows[0]["state"] == "healthy" and rows[0]["running"] == 0
        table = home.run("ps", cwd=repo).stdout.splitlines()
        assert len(table) == 2 and table[1].split()[0] == str(rows[0]["pid"])

        restarted = home.run("restart", cwd=tmp_path)
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        assert f"lre (pid {rows[0]['pid']}) stopped" in restarted.stdout
        again = json.loads(home.run("ps", "--json", cwd=repo).stdout)
        assert len(again) == 1 and again[0]["pid"] != rows[0]["pid"]
        assert again[0]["address"] == f"127.0.0.1:{home.grpc_port}"  # the same port
        assert f"{repo} uses lre again" in restarted.stdout
        assert f"grpc://127.0.0.1:{home.grpc_port}" in (repo / "lre.bazelrc").read_text()

        stop = home.run("stop", cwd=tmp_path)
        assert stop.returncode == 0, stop.stderr
        assert f"{repo}: builds locally now" in stop.stdout
        assert home.run("status", cwd=repo).returncode == 3
        assert "--remote_executor" not in (repo / "lre.bazelrc").read_text()

        start = home.run("start", "--port", str(home.grpc_port), cwd=tmp_path)
        assert start.returncode == 0, start.stderr
        assert "lre running in the background" in start.stdout
        assert f"grpc://127.0.0.1:{home.grpc_port}" in (repo / "lre.bazelrc").read_text()
    finally:
        down = home.run("down", cwd=repo)
    assert down.returncode == 0, down.stderr


def test_the_detached_process_is_named_lre_and_stats_says_when_lre_is_down(
    tmp_path: Path,
) -> None:
    import psutil

    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    down = home.run("stats", cwd=repo)
    assert down.returncode == 1
    assert "lre is not running" in down.stderr and "Errno" not in down.stderr
    started = home.run("up", "--detach", "--port", str(home.grpc_port), cwd=repo)
    assert started.returncode == 0, started.stderr
    try:
        pid = json.loads(home.run("status", "--json", cwd=repo).stdout)["pid"]
        assert psutil.Process(pid).name() == "lre"
    finally:
        assert home.run("down", cwd=repo).returncode == 0


def _budget(home: LreHome, repo: Path) -> int:
    stats = home.run("stats", "--json", cwd=repo)
    assert stats.returncode == 0, stats.stdout + stats.stderr
    return int(json.loads(stats.stdout)["memory_capacity_bytes"])


def test_settings_stick_across_up_restart_and_down(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    port = str(home.grpc_port)
    started = home.run("up", "--detach", "--port", port, "--memory-budget", "1G", cwd=repo)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        assert _budget(home, repo) == 1 << 30
        # config show: what the running lre runs with (its flag applied), not a re-resolve.
        shown = home.run("config", "show", cwd=repo)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.startswith("// the config lre (pid "), shown.stdout[:300]
        budgets = [ln.strip() for ln in shown.stdout.splitlines() if "memory_budget:" in ln]
        assert budgets and all("1GiB" in b or "1073741824" in b for b in budgets), budgets

        # Another value while lre runs: said, and refused (not silently ignored).
        other = home.run("up", "--memory-budget", "512M", "--cpus", "1", cwd=repo)
        assert other.returncode == 2, other.stdout + other.stderr
        assert "error: --memory-budget 512M: lre runs with --memory-budget 1G" in other.stderr
        assert "error: --cpus 1: lre runs with the config's value (no --cpus)" in other.stderr
        moved = home.run("up", "--port", str(home.grpc_port + 1), cwd=repo)
        assert moved.returncode == 2 and "error: --port" in moved.stderr, moved.stderr
        same = home.run("up", "--memory-budget", "1GiB", cwd=repo)
        assert same.returncode == 0, same.stdout + same.stderr

        restarted = home.run("restart", cwd=tmp_path)
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        assert "--memory-budget 1G" in restarted.stdout
        assert _budget(home, repo) == 1 << 30

        assert home.run("down", cwd=repo).returncode == 0
        # Stopped: restart takes the last settings, port included.
        again = home.run("restart", cwd=tmp_path)
        assert again.returncode == 0, again.stdout + again.stderr
        rows = json.loads(home.run("ps", "--json", cwd=repo).stdout)
        assert [r["address"] for r in rows] == [f"127.0.0.1:{port}"]
        assert _budget(home, repo) == 1 << 30
    finally:
        down = home.run("down", cwd=repo)
    assert down.returncode == 0, down.stderr


class _StatusAnswer(http.server.BaseHTTPRequestHandler):
    """/status of a stand-in lre: the code and JSON the test sets on the server."""

    def do_GET(self) -> None:
        code, body = self.server.answer  # type: ignore[attr-defined]
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def test_status_exits_2_while_lre_answers_unhealthy(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    server = http.server.HTTPServer(("127.0.0.1", 0), _StatusAnswer)
    server.answer = (503, {"status": "unhealthy", "problems": ["disk: 10 MiB free"]})  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stand_in = subprocess.Popen(["sleep", "120"])
    try:
        write_pid_file(
            home.root / "state",
            RunningServer(
                pid=stand_in.pid,
                grpc_address="127.0.0.1:1",
                status_address=f"127.0.0.1:{server.server_address[1]}",
                repo="",
                log_file="",
                started=psutil.Process(stand_in.pid).create_time(),
            ),
        )
        sick = home.run("status", cwd=tmp_path)
        assert sick.returncode == 2, sick.stdout + sick.stderr
        assert sick.stdout.startswith("lre is running: UNHEALTHY: disk: 10 MiB free")
        server.answer = (200, {"status": "ok", "running": 0, "queued": 0})  # type: ignore[attr-defined]
        well = home.run("status", cwd=tmp_path)
        assert well.returncode == 0, well.stdout + well.stderr
    finally:
        stand_in.kill()
        stand_in.wait()
        server.shutdown()
        server.server_close()
