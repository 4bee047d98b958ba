"""``lre doctor``'s cache checks turn the running lre's cache notices into WARNs."""

from __future__ import annotations

from pathlib import Path

from lre.cli._daemon import RunningServer
from lre.cli._doctor_cache import cache_checks
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
