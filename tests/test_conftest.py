"""The suite-wide rules of tests/conftest.py, run on a tiny suite of their own:
a skip fails under any true CI value, and a test past its time limit fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SUITE = """
import subprocess
import time

import pytest


def test_skips():
    pytest.skip("no such tool here")


def test_sleeps():
    time.sleep(60)


def test_waits_for_a_child():
    subprocess.run(["sleep", "60"], check=False)


@pytest.mark.time_limit(30)
def test_may_take_longer():
    time.sleep(2)
"""


def run_suite(tmp_path: Path, ci: str | None, *select: str) -> subprocess.CompletedProcess[str]:
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_rules.py").write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(ROOT)
    env["LRE_TEST_TIMEOUT"] = "1"
    options = ["-p", "no:cacheprovider", "-q", "-rA", "-o", "addopts=", "-o", "trio_mode=false"]
    tests = [f"test_rules.py::{name}" for name in select]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *options, *tests],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_skip_fails_under_any_true_ci_value(tmp_path: Path, ci: str) -> None:
    result = run_suite(tmp_path, ci, "test_skips")
    assert result.returncode == 1, result.stdout
    assert "1 failed" in result.stdout and "no such tool here" in result.stdout


@pytest.mark.parametrize("ci", [None, "false"])
def test_a_skip_stays_a_skip_outside_ci(tmp_path: Path, ci: str | None) -> None:
    result = run_suite(tmp_path, ci, "test_skips")
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout


def test_a_test_past_its_time_limit_fails(tmp_path: Path) -> None:
    result = run_suite(tmp_path, None, "test_sleeps", "test_waits_for_a_child")
    assert result.returncode == 1, result.stdout
    assert "2 failed" in result.stdout, result.stdout
    assert result.stdout.count("ran past its time limit of 1 s") >= 2, result.stdout
    assert "every thread" in result.stderr or "every thread" in result.stdout


def test_a_marked_test_gets_its_own_limit(tmp_path: Path) -> None:
    result = run_suite(tmp_path, None, "test_may_take_longer")
    assert result.returncode == 0, result.stdout + result.stderr
