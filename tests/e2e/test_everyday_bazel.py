"""Everyday use with a real Bazel (Debian's 4.2.3): up, a second repository, --config=lre, down.

What a user does: ``lre up`` in one repository, ``bazel build --config=lre``
there (the quickstart's opt-in form, on top of the default line lre wrote),
``lre up`` in a second repository while lre runs, then ``lre down``, after
which both repositories must build locally with lre's try-import line still
in their ``.bazelrc``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from lre.cli._bazel_client import repository_id
from tests._support.chromium import drawn_marks, render_dom
from tests._support.configs import app_config_text
from tests._support.processes import require_tool
from tests._support.servers import free_port
from tests.cli._lre import run_lre
from tests.e2e._bazel import BazelSession, parse_process_summary, require_bazel
from tests.e2e._workspace import COVERAGE_TOOLS_BUILD, Workspace, generate_workspace

pytestmark = [pytest.mark.slow, pytest.mark.bazel]

DOCS = Path(__file__).parents[2] / "docs"


def _runs_right(ws: Workspace) -> None:
    out = subprocess.run([ws.binary, "50"], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == ws.expected_checksum(50)


def test_config_lre_second_repo_and_local_builds_after_down(tmp_path: Path) -> None:
    require_bazel()
    first = generate_workspace(tmp_path / "first", modules=2, funcs=1, seed=1)
    second = generate_workspace(tmp_path / "second", modules=1, funcs=1, seed=2)
    root = tmp_path / "lre-root"
    config = tmp_path / "lre.json5"
    config.write_text(
        app_config_text(
            root,
            status_port=free_port(),
            extra_worker=', platform_properties: { OSFamily: { values: ["Linux"] } }',
        )
    )
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    port = free_port()
    up = run_lre(
        "up", "--detach", "--config", str(config), "--port", str(port), cwd=first.root, env=env
    )
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        with BazelSession(first.root, tmp_path / "bazel-first") as bazel:
            # The default line already applies --config=lre; naming it again
            # expands it twice, which crashed Bazel 4.2.3 on a repeated
            # exec property.
            doubled = bazel.build([first.target], ["--config=lre"])
            summary = doubled.check()
            assert summary.count("remote") == first.spawn_count, summary
            _runs_right(first)

            again = run_lre("up", "--config", str(config), cwd=second.root, env=env)
            assert again.returncode == 0, again.stdout + again.stderr
            assert "already running" in again.stdout
            with BazelSession(second.root, tmp_path / "bazel-second") as other:
                remote = other.build([second.target]).check()
                assert remote.count("remote") == second.spawn_count, remote
            _runs_right(second)
    finally:
        down = run_lre("down", "--config", str(config), cwd=first.root, env=env)
        log = root / "state" / "lre.log"
        if down.returncode != 0 and log.exists():
            print(log.read_text()[-5000:])
    assert down.returncode == 0, down.stderr
    for ws in (first, second):
        assert f"{ws.root}: builds locally now" in down.stdout
        assert "try-import %workspace%/lre.bazelrc" in (ws.root / ".bazelrc").read_text()

    # lre is stopped: a clean build must run locally, not fail on a refused connection.
    with BazelSession(first.root, tmp_path / "bazel-first") as bazel:
        bazel.clean()
        local = bazel.build([first.target]).check()
        assert local.count("remote") == 0, local
        assert local.local == first.spawn_count, local
        _runs_right(first)


def test_a_token_listener_gets_the_header_from_the_token_file(tmp_path: Path) -> None:
    require_bazel()
    ws = generate_workspace(tmp_path / "ws", modules=1, funcs=1, seed=3)
    token = tmp_path / "token"
    token.write_text("secret-of-this-test\n")
    token.chmod(0o600)
    config = tmp_path / "lre.json5"
    config.write_text(
        app_config_text(
            tmp_path / "lre-root",
            extra_worker=', platform_properties: { OSFamily: { values: ["Linux"] } }',
        ).replace(
            'listener: { address: "127.0.0.1:0" }',
            f'listener: {{ address: "127.0.0.1:0", auth_token_file: "{token}" }}',
        )
    )
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    up = run_lre("up", "--detach", "--config", str(config), cwd=ws.root, env=env)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        # Two --remote_header lines (the token and the repository's name):
        # Bazel 4.2.3 takes both and sends both on every call.
        headers = [
            line
            for line in (ws.root / "lre.bazelrc").read_text().splitlines()
            if line.startswith("build:lre --remote_header=")
        ]
        assert len(headers) == 2, headers
        with BazelSession(ws.root, tmp_path / "bazel") as bazel:
            summary = bazel.build([ws.target]).check()
            assert summary.count("remote") == ws.spawn_count, summary
        builds = run_lre("builds", "--json", "--config", str(config), cwd=ws.root, env=env)
        assert builds.returncode == 0, builds.stderr
        (build,) = json.loads(builds.stdout)
        assert build["repository"] == repository_id(ws.root), build
    finally:
        down = run_lre("down", "--config", str(config), cwd=ws.root, env=env)
    assert down.returncode == 0, down.stderr
    _runs_right(ws)


def test_bazel_test_runs_offline_through_lre_with_the_documented_stand_in(
    tmp_path: Path,
) -> None:
    """``bazel test`` needs ``@remote_coverage_tools`` even without coverage;
    the stand-in docs/quickstart-bazel.md gives is enough, and the test
    runs on lre."""
    require_bazel()
    assert COVERAGE_TOOLS_BUILD.strip() in (DOCS / "quickstart-bazel.md").read_text()
    ws = generate_workspace(tmp_path / "ws", modules=1, funcs=1, seed=5)
    with (ws.root / "BUILD").open("a") as build:
        build.write('cc_test(name = "passes", srcs = ["src/passes.c"])\n')
    (ws.root / "src" / "passes.c").write_text("int main(void) { return 0; }\n")
    config = tmp_path / "lre.json5"
    config.write_text(
        app_config_text(
            tmp_path / "lre-root",
            extra_worker=', platform_properties: { OSFamily: { values: ["Linux"] } }',
        )
    )
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    up = run_lre("up", "--detach", "--config", str(config), "--port", str(free_port()),
                 cwd=ws.root, env=env)  # fmt: skip
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        with BazelSession(ws.root, tmp_path / "bazel") as bazel:
            tested = bazel.run("test", "//:passes", timeout=600)
        assert tested.returncode == 0, tested.stdout[-3000:]
        assert "1 test passes" in tested.stdout, tested.stdout[-3000:]
        assert "mirror.bazel.build" not in tested.stdout
        summary = parse_process_summary(tested.stdout)
        assert summary is not None and summary.count("remote") >= 3, tested.stdout[-2000:]
    finally:
        run_lre("down", "--config", str(config), cwd=ws.root, env=env)


def _status_json(address: str) -> tuple[int, dict[str, object]]:
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{address}/status", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_cancelled_build_is_not_a_worker_fault(tmp_path: Path) -> None:
    """Ctrl-C in ``bazel build``: lre cancels the running actions, and stays healthy."""
    import signal

    from tests.e2e._workspace import write_offline_scaffold

    require_bazel()
    ws = tmp_path / "ws"
    write_offline_scaffold(ws, "cancelled")
    (ws / "BUILD").write_text(
        "".join(
            f'genrule(name = "slow{i}", outs = ["slow{i}.txt"], cmd = "sleep 300; echo {i} > $@")\n'
            for i in range(4)
        )
    )
    status_port = free_port()
    config = tmp_path / "lre.json5"
    config.write_text(
        app_config_text(
            tmp_path / "lre-root",
            status_port=status_port,
            max_inflight=4,
            extra_worker=', platform_properties: { OSFamily: { values: ["Linux"] } }',
        ).replace("cpu_count: 2,", "cpu_count: 4,")
    )
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    address = f"127.0.0.1:{status_port}"
    up = run_lre("up", "--detach", "--config", str(config), cwd=ws, env=env)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        with BazelSession(ws, tmp_path / "bazel") as bazel:
            for _round in range(2):
                build = subprocess.Popen(
                    [bazel._bazel, *bazel._startup, "build", "//:all"],
                    cwd=ws,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                try:
                    deadline = time.monotonic() + 300
                    while _status_json(address)[1].get("running", 0) < 2:
                        assert build.poll() is None, build.communicate()[0]
                        assert time.monotonic() < deadline, "the actions never ran"
                        time.sleep(0.5)
                    build.send_signal(signal.SIGINT)  # the user's Ctrl-C
                    output = build.communicate(timeout=120)[0]
                finally:
                    if build.poll() is None:
                        build.kill()
                        build.wait()
                assert build.returncode != 0, output
                deadline = time.monotonic() + 120
                while _status_json(address)[1].get("running", 1) != 0:
                    assert time.monotonic() < deadline, _status_json(address)
                    time.sleep(0.5)
        code, body = _status_json(address)
        assert code == 200, body
        # Told as what it was: cancelled, not failed, and drawn as cancelled.
        deadline = time.monotonic() + 30
        while True:  # the history is written once a second
            listed = run_lre("builds", "--json", "--config", str(config), cwd=ws, env=env)
            assert listed.returncode == 0, listed.stderr
            last = json.loads(listed.stdout)[-1]
            if last["cancelled"] >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert last["failed"] == 0 and last["cancelled"] >= 2, last
        page = tmp_path / "report.html"
        report = run_lre(
            "report", "last", "-o", str(page), "--config", str(config), cwd=ws, env=env
        )
        assert report.returncode == 0, report.stderr
        dom, _ = render_dom(require_tool("chromium"), page, tmp_path / "profile")
        assert drawn_marks(dom)["cancel-marks"] >= 2, dom[:2000]
        status = run_lre("status", "--config", str(config), cwd=ws, env=env)
        assert status.returncode == 0, status.stdout + status.stderr
        doctor = run_lre("doctor", "--json", "--config", str(config), cwd=ws, env=env)
        checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
        assert checks["lre"]["status"] == "OK", checks["lre"]
    finally:
        down = run_lre("down", "--now", "--config", str(config), cwd=ws, env=env)
        if down.returncode != 0:
            down = run_lre("down", "--config", str(config), cwd=ws, env=env)
    assert down.returncode == 0, down.stderr


def test_down_during_a_build_waits_for_it_and_now_cancels(tmp_path: Path) -> None:
    """``lre down`` mid-build says so and lets the build finish; ``--now`` cancels it."""
    import time

    from tests.e2e._workspace import write_offline_scaffold

    require_bazel()
    ws = tmp_path / "ws"
    write_offline_scaffold(ws, "drain")
    status_port = free_port()
    config = tmp_path / "lre.json5"
    config.write_text(
        app_config_text(
            tmp_path / "lre-root",
            status_port=status_port,
            extra_worker=', platform_properties: { OSFamily: { values: ["Linux"] } }',
        )
    )
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    address = f"127.0.0.1:{status_port}"
    with BazelSession(ws, tmp_path / "bazel") as bazel:
        for round_, flag in enumerate(("", "--now")):
            (ws / "BUILD").write_text(
                'genrule(name = "slow", outs = ["slow.txt"], '
                f'cmd = "sleep 15; echo {round_} > $@")\n'
            )
            up = run_lre("up", "--detach", "--config", str(config), cwd=ws, env=env)
            assert up.returncode == 0, up.stdout + up.stderr
            build = subprocess.Popen(
                [bazel._bazel, *bazel._startup, "build", "//:slow"],
                cwd=ws,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            try:
                deadline = time.monotonic() + 300
                while _status_json(address)[1].get("running", 0) < 1:
                    assert build.poll() is None, build.communicate()[0]
                    assert time.monotonic() < deadline, "the action never ran"
                    time.sleep(0.3)
                down = run_lre(
                    "down", *([flag] if flag else []), "--config", str(config), cwd=ws, env=env
                )
                output = build.communicate(timeout=300)[0]
            finally:
                if build.poll() is None:
                    build.kill()
                    build.wait()
            assert down.returncode == 0, down.stdout + down.stderr
            assert "stopped" in down.stdout
            if flag:
                assert "cancelling 1 running and 0 queued action(s)" in down.stdout, down.stdout
                assert "errors during bulk transfer" in down.stdout  # what Bazel says, named
                assert build.returncode != 0, output
            else:
                assert "is running 1 action(s)" in down.stdout, down.stdout
                assert "waiting for them to finish" in down.stdout
                assert build.returncode == 0, output
                summary = parse_process_summary(output)
                assert summary is not None and summary.count("remote") == 1, output
