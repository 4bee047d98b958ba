"""`lre cache`, `lre cache clean` and `lre cache gc` as a user runs them."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import trio

from lre.cas import FilesystemActionCache, FilesystemStore
from lre.cas._blob_io import write_bytes
from lre.digest import Digest, digest_of
from tests._support.reapi import Client, response_of
from tests.cli._lre import run_lre
from tests.cli.running_lre import LreHome, bazel_repo, detached, private_home
from tests.e2e._bazel import BazelSession
from tests.e2e._workspace import generate_workspace


def _fill(home: LreHome, sizes: list[int]) -> list[Digest]:
    """Store one blob per size (the first is the least recently used) and two
    action results, as a previous lre run would have left them."""

    async def fill() -> list[Digest]:
        store = FilesystemStore(home.root / "cas", home.root / "tmp" / "cas", 1 << 30)
        await store.open()
        digests = [await write_bytes(store, bytes([i]) * size) for i, size in enumerate(sizes)]
        cache = FilesystemActionCache(home.root / "ac")
        await cache.open()
        await cache.put(digest_of(b"action 1"), b"result 1")
        await cache.put(digest_of(b"action 2"), b"result 2")
        return digests

    digests = trio.run(fill)
    for age, digest in enumerate(reversed(digests)):
        path = home.root / "cas" / digest.hash[:2] / f"{digest.hash}-{digest.size_bytes}"
        os.utime(path, (1_700_000_000 - age * 60, 1_700_000_000 - age * 60))
    return digests


def _present(home: LreHome, digests: list[Digest]) -> list[bool]:
    return [(home.root / "cas" / d.hash[:2] / f"{d.hash}-{d.size_bytes}").exists() for d in digests]


def _summary(home: LreHome, cwd: Path) -> dict[str, object]:
    result = home.run("cache", "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    document: dict[str, object] = json.loads(result.stdout)
    return document


def test_summary_from_disk_and_gc_to_a_size(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    digests = _fill(home, [4000, 3000, 2000, 1000])
    text = home.run("cache", cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "lre is not running: figures from disk" in text.stdout
    assert "CAS cas: 4 blobs, 9.8 KiB of 1.0 GiB" in text.stdout
    assert "action cache ac: 2 entries, 16 B" in text.stdout
    assert "hit rate: unknown" in text.stdout
    document = _summary(home, tmp_path)
    assert document["source"] == "disk"
    assert document["hit_rate"] is None
    assert document["stores"] == [
        {
            "name": "cas",
            "kind": "cas",
            "path": str(home.root / "cas"),
            "entries": 4,
            "bytes": 10000,
            "max_bytes": 1 << 30,
        },
        {
            "name": "ac",
            "kind": "action_cache",
            "path": str(home.root / "ac"),
            "entries": 2,
            "bytes": 16,
            "max_bytes": 64 << 20,  # no eviction_policy in this config: the default
        },
    ]

    for bad in ("10X", "-5", "lots"):
        refused = home.run("cache", "gc", "--to", bad, cwd=tmp_path)
        assert refused.returncode == 2
        assert f"'{bad}' is not a size" in refused.stderr
    assert _present(home, digests) == [True] * 4

    shrunk = home.run("cache", "gc", "--to", "3.5KB", cwd=tmp_path)  # 3500 bytes
    assert shrunk.returncode == 0, shrunk.stderr
    assert "CAS cas: evicted 2 blobs" in shrunk.stdout
    assert _present(home, digests) == [False, False, True, True]  # the oldest went
    again = home.run("cache", "gc", "--to", "1GiB", cwd=tmp_path)
    assert "already within 1.0 GiB" in again.stdout


def _clean_at_a_terminal(home: LreHome, cwd: Path, answer: bytes) -> tuple[int, str]:
    """`lre cache clean` with a pseudo-terminal as stdin, answering ``answer``."""
    controller, terminal = pty.openpty()
    try:
        os.write(controller, answer)
        result = subprocess.run(
            [sys.executable, "-m", "lre", "cache", "clean", "--config", str(home.config)],
            cwd=cwd,
            env=home.env,
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    return result.returncode, result.stdout + result.stderr


def test_clean_asks_first(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    digests = _fill(home, [100, 200])
    unattended = home.run("cache", "clean", cwd=tmp_path)  # stdin is not a terminal
    assert unattended.returncode == 1
    assert "pass --yes" in unattended.stderr
    code, output = _clean_at_a_terminal(home, tmp_path, b"n\n")
    assert (code, "nothing deleted" in output) == (1, True), output
    assert _present(home, digests) == [True, True]

    code, output = _clean_at_a_terminal(home, tmp_path, b"y\n")
    assert code == 0, output
    assert "Delete all of it (316 B)?" in output
    assert _present(home, digests) == [False, False]
    stores = _summary(home, tmp_path)["stores"]
    assert isinstance(stores, list)
    assert [(s["entries"], s["bytes"]) for s in stores] == [(0, 0), (0, 0)]


def test_clean_yes_skips_the_question(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    digests = _fill(home, [100])
    result = home.run("cache", "clean", "--yes", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "deleted 116 B" in result.stdout
    assert _present(home, digests) == [False]


def test_live_figures_and_gc_through_the_running_lre(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    digests = _fill(home, [100, 200, 300])
    repo = bazel_repo(tmp_path)
    with detached(home, repo):
        text = home.run("cache", cwd=repo)
        assert text.returncode == 0, text.stderr
        assert "live figures" in text.stdout
        assert "CAS cas: 3 blobs, 600 B of 1.0 GiB" in text.stdout
        assert "hit rate: no action looked up yet" in text.stdout
        document = _summary(home, repo)
        assert (document["source"], document["hits"], document["misses"]) == ("live", 0, 0)
        # A client asks for the last blob: lre has now told it that it exists.
        with Client(f"127.0.0.1:{home.grpc_port}") as client:
            assert client.missing([digests[2]]) == []
        shrunk = home.run("cache", "gc", "--to", "1", cwd=repo)
        assert shrunk.returncode == 0, shrunk.stderr
        assert "through the running lre" in shrunk.stdout
        assert "evicted 2 blobs" in shrunk.stdout
        assert "kept 300 B that lre told clients exist in the last 3 h" in shrunk.stdout
        assert _present(home, digests) == [False, False, True]
        assert "CAS cas: 1 blobs, 300 B" in home.run("cache", cwd=repo).stdout
        with Client(f"127.0.0.1:{home.grpc_port}") as client:
            assert client.missing(digests[:2]) == digests[:2]  # the index knows
        # The repository's own bazelrc builds without the bytes: on a Bazel
        # before 6.2 (Debian's 4.2.3 here) only `bazel clean` recovers.
        with (repo / ".bazelrc").open("a") as rc:
            rc.write("build --remote_download_toplevel\n")
        forced = home.run("cache", "clean", "--yes", "--force", cwd=repo)
        assert forced.returncode == 0, forced.stderr
        assert "deleted 316 B" in forced.stdout
        assert "`bazel clean`" in forced.stdout and "`buck2 clean`" in forced.stdout
        if shutil.which("bazel"):
            assert f"`bazel clean` in {repo} before the next build: {repo}/.bazelrc:" in (
                forced.stdout
            )
        assert _present(home, digests) == [False, False, False]


def test_hit_rate_after_a_real_bazel_rebuild_from_the_cache(tmp_path: Path) -> None:
    home = private_home(
        tmp_path, extra_worker=', platform_properties: { OSFamily: { values: ["Linux"] } }'
    )
    ws = generate_workspace(tmp_path / "ws", modules=2, funcs=1)
    with detached(home, ws.root), BazelSession(ws.root, tmp_path / "bazel-root") as bazel:
        assert bazel.build([ws.target]).check().count("remote") == ws.spawn_count
        first = _summary(home, ws.root)
        assert (first["hits"], first["misses"]) == (0, ws.spawn_count), first
        bazel.clean()
        cached = bazel.build([ws.target]).check()
        assert cached.count("remote cache hit") == ws.spawn_count, cached
        second = _summary(home, ws.root)
        assert second["lookups"] == {
            "get_action_result_hits": ws.spawn_count,
            "execute_hits": 0,
            "misses": ws.spawn_count,
        }
        assert second["hit_rate"] == 0.5
        text = home.run("cache", cwd=ws.root)
        today = time.strftime("%Y-%m-%d")
        assert (
            f"hit rate: 50% ({ws.spawn_count} of {2 * ws.spawn_count} actions since {today}"
        ) in text.stdout or "actions since " in text.stdout, text.stdout  # near midnight
        assert (
            f": {ws.spawn_count} found by GetActionResult, 0 by Execute "
            f"in the action cache, {ws.spawn_count} executed)"
        ) in text.stdout
        assert "zeroed" not in text.stdout  # never zeroed
        stores = second["stores"]
        assert isinstance(stores, list)
        assert stores[0]["entries"] > 0 and stores[1]["entries"] == ws.spawn_count


def test_a_store_that_cannot_be_opened_is_one_error_line(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    text = home.config.read_text()
    # The CAS temp directory on another filesystem than its content (/dev/shm is tmpfs).
    elsewhere = Path("/dev/shm") / f"lre-{tmp_path.name}"
    home.config.write_text(text.replace(f'"{home.root}/tmp/cas"', f'"{elsewhere}"'))
    try:
        result = home.run("cache", "gc", "--to", "1G", cwd=tmp_path)
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)
    assert result.returncode == 1
    assert result.stderr.startswith("error: filesystem store: content_path and temp_path must")
    assert "Traceback" not in result.stderr


def test_client_hits_split_survive_a_restart_and_zero(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    address = f"127.0.0.1:{home.grpc_port}"
    with detached(home, repo):
        with Client(address) as client:
            prepared = client.prepare(["/bin/true"])
            done = response_of(client.execute(prepared)[-1])
            assert done.status.code == 0 and not done.cached_result  # one miss
            assert client.get_result(Digest.from_proto(prepared.action_digest)) is not None
            again = response_of(client.execute(prepared)[-1])
            assert again.cached_result  # an Execute hit
        first = _summary(home, repo)
        assert first["lookups"] == {"get_action_result_hits": 1, "execute_hits": 1, "misses": 1}
        metrics = home.run("stats", "--json", cwd=repo)
        assert metrics.returncode == 0, metrics.stderr
        shown = home.run("stats", cwd=repo).stdout
        assert "67% (AC 1 + exec 1)" in " ".join(shown.split()), shown
    with detached(home, repo):  # a restart keeps them
        assert _summary(home, repo)["lookups"] == first["lookups"]
        with urllib.request.urlopen(f"http://127.0.0.1:{home.status_port}/metrics") as reply:
            text = reply.read().decode()
        assert 'lre_client_cache_hits_total{via="get_action_result"} 1' in text
        assert 'lre_client_cache_hits_total{via="execute"} 1' in text
        assert "lre_client_cache_misses_total 1" in text
        zeroed = home.run("stats", "--zero", cwd=repo)
        assert zeroed.returncode == 0, zeroed.stderr
        assert "through the running lre" in zeroed.stdout
        assert _summary(home, repo)["lookups"] == {
            "get_action_result_hits": 0,
            "execute_hits": 0,
            "misses": 0,
        }


def test_the_action_cache_shows_its_configured_size(tmp_path: Path) -> None:
    # The embedded default, as a new user has it: action cache "ac" of 1GiB.
    env = {**os.environ, "HOME": str(tmp_path / "home"), "LRE_HOME": str(tmp_path / "state")}
    env.pop("LRE_CONFIG", None)
    env.pop("XDG_CONFIG_HOME", None)
    shown = run_lre("cache", "--json", cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    stores = {s["name"]: s for s in json.loads(shown.stdout)["stores"]}
    assert stores["ac"]["kind"] == "action_cache"
    assert stores["ac"]["max_bytes"] == 1 << 30
    text = run_lre("cache", cwd=tmp_path, env=env)
    assert "action cache ac: 0 entries, 0 B of 1.0 GiB (0%)" in text.stdout, text.stdout


def test_gc_with_lre_stopped_keeps_blobs_clients_were_told_exist(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    digests = _fill(home, [4000, 3000, 2000, 1000])
    # The two newest were told to a client a minute ago (within keep_told,
    # 3 h): their files' mtimes say so. The two oldest are days old.
    now = time.time()
    for digest in digests[2:]:
        path = home.root / "cas" / digest.hash[:2] / f"{digest.hash}-{digest.size_bytes}"
        os.utime(path, (now - 60, now - 60))
    shrunk = home.run("cache", "gc", "--to", "1", cwd=tmp_path)
    assert shrunk.returncode == 0, shrunk.stderr
    assert "CAS cas: evicted 2 blobs" in shrunk.stdout, shrunk.stdout
    assert "that lre told clients exist in the last 3 h" in shrunk.stdout, shrunk.stdout
    assert _present(home, digests) == [False, False, True, True]
    forced = home.run("cache", "gc", "--to", "1", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert _present(home, digests) == [False] * 4
