"""``lre doctor``'s cache checks turn the running lre's cache notices into WARNs."""

from __future__ import annotations

from pathlib import Path

from lre.cli._daemon import RunningServer
from lre.cli._doctor_cache import bytes_check, cache_checks
from lre.cli._running import Lookup
from lre.config import default_config


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
