"""``lre doctor``'s cache checks turn the running lre's cache notices into WARNs."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

from lre.cli._daemon import RunningServer
from lre.cli._doctor_cache import bytes_check, cache_checks
from lre.cli._running import Lookup
from lre.config import default_config
from lre.digest import Digest
from tests._support.reapi import Client
from tests.cli.running_lre import bazel_repo, detached, private_home


def _lookup(tmp_path: Path, running: bool) -> Lookup:
    server = RunningServer(1, "127.0.0.1:1", "127.0.0.1:2", "", "", 0.0) if running else None
    return Lookup(default_config(), tmp_path, server)


def test_each_notice_is_a_warning_with_its_step(tmp_path: Path) -> None:
    status = {
        "cache": [
            "upstream action cache upstream-ac: the last 50 lookups all missed; the latest "
            "3 missed actions carried environment keys [PATH] and platform properties "
            "[OSFamily=Linux]; ... --execution_log_json_file=FILE ...",
            "store cas holds 2000 bytes beyond its max_bytes of 3000: ...",
        ]
    }
    misses, overrun = cache_checks(_lookup(tmp_path, True), status)
    assert (misses.status, overrun.status) == ("WARN", "WARN")
    assert "environment keys [PATH]" in misses.message
    assert "--execution_log_json_file" in misses.fix
    assert "keep_told" in overrun.fix
    (fine,) = cache_checks(_lookup(tmp_path, True), {"cache": []})
    assert fine.status == "OK"
    (skipped,) = cache_checks(_lookup(tmp_path, False))
    assert skipped.status == "SKIP"


def test_building_without_the_bytes_on_old_bazel_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / ".bazelrc").write_text(
        "# build --remote_download_minimal\nbuild --remote_download_toplevel\n"
        "try-import %workspace%/lre.bazelrc\n"
    )
    old = bytes_check(tmp_path, (4, 2, 3))
    assert old.status == "WARN"
    assert f"{tmp_path / '.bazelrc'}:2" in old.message and "bulk transfer" in old.message
    assert "bazel clean" in old.fix
    assert bytes_check(tmp_path, (6, 2, 0)).status == "OK"
    (tmp_path / ".bazelrc").write_text("build --jobs=4\n")
    assert bytes_check(tmp_path, (4, 2, 3)).status == "OK"


def test_upstream_misses_reach_status_and_doctor_through_a_running_lre(tmp_path: Path) -> None:
    # The instances' action cache is a local tier over a "team" one (a memory
    # store standing in for a cluster's) that has none of this laptop's keys.
    home = private_home(tmp_path)
    text = home.config.read_text()
    local_ac = '{ name: "ac", filesystem:'
    assert local_ac in text
    home.config.write_text(
        text.replace(
            local_ac,
            '{ name: "team-ac", memory: { eviction_policy: { max_bytes: "1MiB" } } },\n'
            '    { name: "ac", fast_slow: { fast: "local-ac", slow: "team-ac" } },\n'
            '    { name: "local-ac", filesystem:',
        )
    )
    repo = bazel_repo(tmp_path)
    with detached(home, repo):
        with Client(f"127.0.0.1:{home.grpc_port}") as client:
            for i in range(50):
                prepared = client.prepare(
                    ["cc", "-c", f"m{i}.c"],
                    env={"PATH": "/home/me/bin:/usr/bin", "CCACHE_DIR": "/tmp/cc"},
                    action_platform={"OSFamily": "Linux"},
                )
                assert client.get_result(Digest.from_proto(prepared.action_digest)) is None
        notices: list[str] = []
        deadline = time.monotonic() + 60  # lre looks every 2 s
        while not notices and time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{home.status_port}/status") as reply:
                notices = [str(n) for n in json.loads(reply.read())["cache"]]
            time.sleep(0.2)
        (notice,) = notices
        assert "upstream action cache ac: the last 50 lookups all missed" in notice
        assert "environment keys [CCACHE_DIR, PATH]" in notice, notice
        assert "platform properties [OSFamily=Linux]" in notice, notice
        doctor = home.run("doctor", cwd=repo)
        said = " ".join(doctor.stdout.split())
        assert "environment keys [CCACHE_DIR, PATH]" in said, doctor.stdout
        assert "--execution_log_json_file" in said, doctor.stdout
    log = (home.state_dir / "lre.log").read_text()
    assert log.count("the last 50 lookups all missed") == 1, log[-3000:]
