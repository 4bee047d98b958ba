"""Crash safety: SIGKILL ``lre up`` during concurrent uploads and action-cache
updates, restart it on the same directories, and check nothing partial or
wrong is served and nothing acknowledged is lost.

Three cycles (the loop in the test; more make a longer run).
"""

from __future__ import annotations

import random
from pathlib import Path

from tests._support.configs import app_config_text
from tests.reliability._crash import Ledger, LreProcess, clean_exit_check, crash_cycle, stray_files


def test_sigkill_during_uploads_never_exposes_partial_data(tmp_path: Path) -> None:
    lre = LreProcess(tmp_path, app_config_text(tmp_path))
    ledger = Ledger()
    rng = random.Random(7)
    try:
        total_calls = 0
        for _ in range(3):
            verdict, calls, _moment = crash_cycle(lre, ledger, rng)
            assert not verdict.problems, verdict.problems
            total_calls += calls
        final = clean_exit_check(lre, ledger)
    finally:
        lre.kill()
    assert not final.problems, final.problems
    assert total_calls > 0, "the load never completed a call; the test proved nothing"
    assert final.verified == final.present and final.present >= len(ledger.acknowledged)
    assert ledger.acknowledged and final.complete_actions > 0
    assert stray_files(tmp_path) == []
