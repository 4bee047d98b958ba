"""Suite-wide rules: one skip policy and a time limit for every test.

- **Skips fail under CI.** A test that cannot run here (a missing tool, no
  root, an old kernel) calls ``pytest.skip``; when ``CI`` holds any true value
  (see ``tests._support.ci``) the skip is reported as a failure naming its
  reason, so a missing install step in ``.ci/run`` can never pass silently.
- **Parallel workers keep what shares state together.** The suite runs on
  pytest-xdist workers (``-n`` in pyproject's addopts, ``--dist loadgroup``):
  every test of a module with a module- or session-scoped fixture (one lre
  or one BuildGrid for many tests), and all of tests/team, go to one worker;
  other tests go to whichever worker is free. ``-n 0`` runs in one process.
- **A time limit per test phase.** Setup, call and teardown each get
  ``LRE_TEST_TIMEOUT`` seconds (default 300, three times that under
  tests/team and tests/e2e, whose first setup builds BuildGrid or a Bazel
  server; ``@pytest.mark.time_limit(s)`` for a test that needs more). Past
  it the main thread gets ``TestTimeout`` (a SIGALRM), every thread's
  traceback is printed, and the test fails instead of hanging the run.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Generator
from pathlib import Path
from types import FrameType

import pytest

from tests._support import attack_report
from tests._support.ci import in_ci

DEFAULT_LIMIT_S = float(os.environ.get("LRE_TEST_TIMEOUT", "300"))


class TestTimeout(BaseException):
    """A test phase ran past its time limit (BaseException: no test's
    ``except Exception`` swallows it)."""

    __test__ = False  # not a test class, despite the name


def pytest_configure(config: pytest.Config) -> None:
    # the ``attack`` marker and its results file (tests/_support/attack_report.py)
    config.pluginmanager.register(attack_report, "lre-attack-report")
    config.addinivalue_line(
        "markers", "time_limit(seconds): this test's phases may take this long (default 300 s)"
    )


def _shares_state(item: pytest.Item) -> str | None:
    """The xdist group of ``item``: its folder for tests/team (one BuildGrid
    per session), its module when the module holds a fixture wider than a
    function, else None (any worker)."""
    here = Path(__file__).parent
    if not item.path.is_relative_to(here):
        return None
    relative = item.path.relative_to(here)
    if relative.parts[0] == "team":
        return "team"
    fixtures = getattr(item, "_fixtureinfo", None)
    if fixtures is not None:
        for name in fixtures.names_closure:
            for definition in fixtures.name2fixturedefs.get(name, ()):
                if definition.scope in ("module", "package", "session"):
                    return str(relative)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        group = _shares_state(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


#: Folders whose first test's setup builds something slow once per session
#: (BuildGrid's venv and database, a Bazel server and its output base).
SLOW_SETUP_FOLDERS = ("team", "e2e")


def _limit_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("time_limit")
    if marker is not None:
        return float(marker.args[0])
    here = Path(__file__).parent
    slow = item.path.is_relative_to(here) and item.path.relative_to(here).parts[0] in (
        SLOW_SETUP_FOLDERS
    )
    return 3 * DEFAULT_LIMIT_S if slow else DEFAULT_LIMIT_S


def _timed(item: pytest.Item, phase: str) -> Generator[None, None, None]:
    limit = _limit_of(item)
    if limit <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum: int, frame: FrameType | None) -> None:
        sys.stderr.write(f"\n{item.nodeid}: {phase} ran past {limit:g} s; every thread:\n")
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        raise TestTimeout(f"{item.nodeid}: {phase} ran past its time limit of {limit:g} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    yield from _timed(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield from _timed(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield from _timed(item, "teardown")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and not hasattr(report, "wasxfail") and in_ci():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI={os.environ.get('CI')!r}, which counts as a failure: {reason}\n"
            "CI must have everything the suite uses (.ci/run installs it)."
        )
