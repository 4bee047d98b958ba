"""A build as the user's commands show it, against a real ``lre up --detach``.

A client that names its repository (``x-lre-repository``) and its build
(``RequestMetadata.tool_invocation_id``) asks for capabilities, waits,
uploads and executes, waits, and reads: ``lre builds`` times the build from
that first request to that last reply (not from its first action to its
last), names the repository, and counts every action the moment the client
has its last reply; ``lre history --repo`` filters by it, ``/status`` lists
it. A build that a ``kill -9`` of lre cut short says so after the next start.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import grpc

from lre.cli._daemon import read_pid_file
from lre.proto import REQUEST_METADATA_KEY, re_pb2
from lre.snapshot import BuildSpan, read_history
from tests._support.reapi import Client
from tests.cli.running_lre import LreHome, bazel_repo, detached, private_home

REPOSITORY = "app-0badcafe"


def _metadata(invocation: str, repository: str = REPOSITORY) -> list[tuple[str, str | bytes]]:
    info = re_pb2.RequestMetadata(
        tool_details=re_pb2.ToolDetails(tool_name="bazel", tool_version="4.2.3"),
        tool_invocation_id=invocation,
        action_mnemonic="Genrule",
        target_id="//app:gen",
    )
    return [(REQUEST_METADATA_KEY, info.SerializeToString()), ("x-lre-repository", repository)]


def _json(home: LreHome, repo: Path, *args: str) -> Any:
    done = home.run(*args, "--json", cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_builds_are_timed_first_request_to_last_reply_with_their_repository_and_no_lag(
    tmp_path: Path,
) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    with detached(home, repo), Client(f"127.0.0.1:{home.grpc_port}") as client:
        invocation = str(uuid.uuid4())
        metadata = _metadata(invocation)
        before = time.time()
        client.capabilities.GetCapabilities(
            re_pb2.GetCapabilitiesRequest(instance_name="main"), metadata=metadata, timeout=30
        )
        time.sleep(2.0)  # what Bazel's analysis would take: no call open
        executed = 0
        for _ in range(3):  # each round read the moment its last reply is in
            for _ in range(2):
                prepared = client.prepare(["/bin/sh", "-c", "echo built"])
                client.execute(prepared, metadata=metadata)
                executed += 1
            time.sleep(1.5)  # downloading outputs after the last action
            client.cas.FindMissingBlobs(
                re_pb2.FindMissingBlobsRequest(instance_name="main"),
                metadata=metadata,
                timeout=30,
            )
            after = time.time()
            (build,) = _json(home, repo, "builds")
            assert build["executed"] == executed, build  # nothing lags behind the reply
            assert build["repository"] == REPOSITORY
            assert build["cut_short"] is False
            # First request to last reply: the quiet seconds before the first
            # action and after the last one count, as the client waited them.
            assert after - before - 0.5 <= build["duration_s"] <= after - before, build
        shown = home.run("builds", cwd=repo)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines()[0].split()[:2] == ["build", "repo"]
        assert REPOSITORY in shown.stdout.splitlines()[1]
        mine = _json(home, repo, "history", "--repo", "app-*")
        assert len(mine) == executed and {r["repository"] for r in mine} == {REPOSITORY}
        other = home.run("history", "--repo", "web-*", cwd=repo)
        assert other.returncode == 0, other.stderr
        assert "no action of repository 'web-*'" in other.stdout and REPOSITORY in other.stdout
        # lre builds --repo: the same rule, a build kept or left out whole
        assert [b["invocation"] for b in _json(home, repo, "builds", "--repo", "app-*")] == [
            invocation
        ]
        assert _json(home, repo, "builds", "--repo", REPOSITORY)[0]["repository"] == REPOSITORY
        assert _json(home, repo, "builds", "--repo", "web-*") == []
        none = home.run("builds", "--repo", "web-*", cwd=repo)
        assert none.returncode == 0, none.stderr
        assert "no build of repository 'web-*'" in none.stdout and REPOSITORY in none.stdout
        with urllib.request.urlopen(f"http://127.0.0.1:{home.status_port}/status") as reply:
            status = json.loads(reply.read())
        (line,) = status["builds"]
        assert (line["invocation"], line["repository"]) == (invocation, REPOSITORY)
        trace = tmp_path / "trace.json"
        done = home.run("trace", invocation, "-o", str(trace), cwd=repo)
        assert done.returncode == 0, done.stderr
        other_data = json.loads(trace.read_text())["otherData"]
        assert other_data["repository"] == REPOSITORY
        assert other_data["duration_s"] == build["duration_s"]
        page = tmp_path / "report.html"
        done = home.run("report", invocation, "-o", str(page), cwd=repo)
        assert done.returncode == 0, done.stderr
        assert f"lre build {invocation} of {REPOSITORY}" in page.read_text()


def _open_span_written(state_dir: Path, invocation: str) -> bool:
    return any(
        isinstance(line, BuildSpan) and line.invocation == invocation and line.open_calls
        for line in read_history(state_dir)
    )


def test_a_build_cut_short_by_kill_9_of_lre_says_so_after_the_next_start(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    started = home.run("up", "--detach", "--port", str(home.grpc_port), cwd=repo)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        invocation = str(uuid.uuid4())
        errors: list[grpc.RpcError] = []
        with Client(f"127.0.0.1:{home.grpc_port}") as client:
            finished = _json(home, repo, "builds")
            assert finished == []
            done_id = str(uuid.uuid4())
            client.execute(client.prepare(["/bin/true"]), metadata=_metadata(done_id, "done-1"))
            prepared = client.prepare(["/bin/sh", "-c", "sleep 20"])

            def build() -> None:
                try:
                    client.execute(prepared, metadata=_metadata(invocation), timeout=60)
                except grpc.RpcError as error:
                    errors.append(error)

            thread = threading.Thread(target=build)
            thread.start()
            deadline = time.monotonic() + 30
            while not _open_span_written(home.state_dir, invocation):
                assert time.monotonic() < deadline, "no span with an open call written"
                time.sleep(0.2)
            server = read_pid_file(home.state_dir)
            assert server is not None
            os.kill(server.pid, signal.SIGKILL)
            thread.join(60)
        assert errors, "the Execute call outlived a kill -9 of lre"
        again = home.run("up", "--detach", "--port", str(home.grpc_port), cwd=repo)
        assert again.returncode == 0, again.stdout + again.stderr
        builds = {b["invocation"]: b for b in _json(home, repo, "builds")}
        assert builds[invocation]["cut_short"] is True
        assert builds[invocation]["repository"] == REPOSITORY
        assert builds[done_id]["cut_short"] is False  # it ended before the kill
        table = home.run("builds", cwd=repo)
        assert table.returncode == 0, table.stderr
        row = next(r for r in table.stdout.splitlines() if r.startswith(invocation[:12]))
        assert "cut short" in row and "cut short: lre stopped during the build" in table.stdout
        shown = home.run("builds", "show", invocation, cwd=repo)
        assert "cut short  lre stopped during this build" in shown.stdout
    finally:
        home.run("down", cwd=repo)


def test_logs_and_events_tell_builds_and_failed_actions_and_not_lres_own_cli_calls(
    tmp_path: Path,
) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    with detached(home, repo), Client(f"127.0.0.1:{home.grpc_port}") as client:
        doctor = home.run("doctor", cwd=repo)  # probes the ports: connects and closes
        assert "status port" in doctor.stdout or "status" in doctor.stdout, doctor.stdout
        for command in ("status", "ps", "builds"):
            assert home.run(command, cwd=repo).returncode == 0, command
        clean = str(uuid.uuid4())  # `bazel clean` asks for the capabilities, and that is all
        client.capabilities.GetCapabilities(
            re_pb2.GetCapabilitiesRequest(instance_name="main"),
            metadata=_metadata(clean),
            timeout=30,
        )
        invocation = str(uuid.uuid4())
        client.execute(client.prepare(["/bin/sh", "-c", "exit 0"]), metadata=_metadata(invocation))
        failing = client.prepare(["/bin/sh", "-c", "exit 3"])
        client.execute(failing, metadata=_metadata(invocation))
        # A client that names no mnemonic and no target: the program names it.
        anonymous = re_pb2.RequestMetadata(tool_invocation_id=invocation)
        unnamed = client.prepare(["/bin/false"])
        client.execute(
            unnamed,
            metadata=[
                (REQUEST_METADATA_KEY, anonymous.SerializeToString()),
                ("x-lre-repository", REPOSITORY),
            ],
        )
        stats_url = f"http://127.0.0.1:{home.status_port}/api/v1/stats"
        with urllib.request.urlopen(stats_url) as reply:
            events = json.loads(reply.read())["events"]
        failures = [e for e in events if e["kind"] == "failure"]
        assert [(e["target"], e["summary"]) for e in failures] == [  # newest first
            ("", "false"),
            ("//app:gen", "Genrule"),
        ]
        assert failures[1]["message"] == "Genrule //app:gen: exited with code 3"
        deadline = time.monotonic() + 30
        while True:
            logs = home.run("logs", cwd=repo)
            assert logs.returncode == 0, logs.stderr
            if "ended after" in logs.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    text = logs.stdout
    short = invocation[:8]
    assert re.search(rf"build {short} of {REPOSITORY} started [0-9.]+ s ago \(bazel 4.2.3\)", text)
    digest = failing.action_digest.hash[:12]
    assert (
        f"action failed: //app:gen Genrule with exit code 3, build {short} of {REPOSITORY}"
        f" (action {digest})" in text
    )
    # named by its program; the digest stays beside it
    assert (
        f"action failed: false with exit code 1, build {short} of {REPOSITORY}"
        f" (action {unnamed.action_digest.hash[:12]})" in text
    )
    assert f"build {short} of {REPOSITORY} ended after" in text
    assert "1 run" not in text and "3 run, 0 from the cache, 2 failed" in text
    assert "rejected" not in text, text  # lre's own CLI calls are no refused requests
    assert clean[:8] not in text  # no build
    shown = _json(home, repo, "builds", "show", invocation)
    assert [(f["target"], f["mnemonic"], f["exit_code"]) for f in shown["failed_actions"]] == [
        ("//app:gen", "Genrule", 3),
        ("", "false", 1),
    ]
    assert shown["failed_actions"][0]["action"] == failing.action_digest.hash
    table = home.run("builds", "show", invocation, cwd=repo).stdout
    rows = table.split("failed actions:\n", 1)[1].splitlines()
    assert rows[0].split() == ["target", "mnemonic", "exit", "action"]
    assert rows[1].split() == ["//app:gen", "Genrule", "3", digest]
    assert rows[2].split() == ["?", "false", "1", unnamed.action_digest.hash[:12]]
