"""The cache contract with a real Bazel (Debian's 4.2.3) and the client config
`lre up` writes: a CAS smaller than one build's outputs still builds and
rebuilds; after `lre cache gc` (lre running, and stopped) the next build
works without `bazel clean`; `lre up` / `lre down` / `lre up` keeps Bazel's
analysis cache, and the actions that did not change are cache hits."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.cli.running_lre import LreHome, detached, private_home
from tests.e2e._bazel import BazelSession, BuildResult, require_bazel
from tests.e2e._workspace import Workspace, generate_workspace

pytestmark = [pytest.mark.slow, pytest.mark.bazel]

DISCARDING = "discarding analysis cache"


def _workspace(tmp_path: Path, modules: int = 3) -> Workspace:
    require_bazel()
    return generate_workspace(tmp_path / "ws", modules=modules, funcs=1, seed=29)


def _edit(ws: Workspace, tag: str) -> None:
    source = ws.root / "src" / "mod_00.c"
    source.write_text(source.read_text() + f"\nint lre_contract_{tag}(void) {{ return 0; }}\n")


def _status(home: LreHome) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{home.status_port}/status") as reply:
        document: dict[str, object] = json.loads(reply.read())
    return document


def _ok(built: BuildResult, home: LreHome) -> None:
    if built.returncode != 0:
        log = home.root / "state" / "lre.log"
        print(log.read_text()[-4000:] if log.exists() else "(no lre log)")
    built.check()


def test_a_cas_smaller_than_one_build_builds_and_rebuilds(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    # The outputs' own limit is set apart: "auto" is half the CAS (4 KiB
    # here, less than one object file), and this test is about the contract.
    home = private_home(
        tmp_path, max_bytes="8KiB", extra_worker=', limits: { max_output_bytes: "64MiB" }'
    )
    with detached(home, ws.root), BazelSession(ws.root, tmp_path / "bazel") as bazel:
        first = bazel.build([ws.target])
        _ok(first, home)
        assert first.check().count("remote") == ws.spawn_count
        (notice,) = _status(home)["cache"]  # type: ignore[misc]
        assert "beyond its max_bytes of 8192" in str(notice), notice
        doctor = " ".join(home.run("doctor", cwd=ws.root).stdout.split())
        assert "WARN" in doctor and "beyond its max_bytes of 8192" in doctor, doctor
        _edit(ws, "a")
        _ok(bazel.build([ws.target]), home)
        bazel.clean()
        again = bazel.build([ws.target])
        _ok(again, home)
        summary = again.check()
        assert summary.count("remote cache hit") >= ws.spawn_count - 2, summary
    # Said once in the log (one overrun from the first build on), not per write.
    log = (home.state_dir / "lre.log").read_text()
    assert log.count("beyond its max_bytes of 8192") == 1, log[-4000:]


def test_after_gc_running_and_stopped_the_next_build_needs_no_clean(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    home = private_home(tmp_path)
    with BazelSession(ws.root, tmp_path / "bazel") as bazel:
        with detached(home, ws.root):
            _ok(bazel.build([ws.target]), home)
            shrunk = home.run("cache", "gc", "--to", "0", cwd=ws.root)
            assert shrunk.returncode == 0, shrunk.stderr
            assert "through the running lre" in shrunk.stdout
            assert "the cache contract" in shrunk.stdout  # what Bazel was told stays
            _edit(ws, "running")
            _ok(bazel.build([ws.target]), home)
            forced = home.run("cache", "gc", "--to", "0", "--force", cwd=ws.root)
            assert forced.returncode == 0, forced.stderr
            _edit(ws, "forced")
            # lre's config downloads every output: nothing Bazel needs was only in lre.
            _ok(bazel.build([ws.target]), home)
        stopped = home.run("cache", "gc", "--to", "0", cwd=ws.root)
        assert stopped.returncode == 0, stopped.stderr
        assert "through the running lre" not in stopped.stdout
        with detached(home, ws.root):
            _edit(ws, "stopped")
            after = bazel.build([ws.target])
            _ok(after, home)
            assert DISCARDING not in after.output


def test_up_down_up_keeps_the_analysis_cache_and_unchanged_actions_hit(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    home = private_home(tmp_path)
    source = ws.root / "src" / "mod_00.c"
    original = source.read_text()
    with BazelSession(ws.root, tmp_path / "bazel") as bazel:
        with detached(home, ws.root):
            first = bazel.build([ws.target])
            _ok(first, home)
            assert first.check().count("remote") == ws.spawn_count
        _edit(ws, "local")  # lre is down: this builds locally
        local = bazel.build([ws.target])
        _ok(local, home)
        assert DISCARDING not in local.output, local.output
        assert local.check().count("remote") == 0
        source.write_text(original)  # back to what lre built and cached
        with detached(home, ws.root):
            back = bazel.build([ws.target])
            _ok(back, home)
            assert DISCARDING not in back.output, back.output
            summary = back.check()
            # mod_00 and the link are the same actions as in the first build.
            assert summary.spawns == summary.count("remote cache hit") == 2, summary
