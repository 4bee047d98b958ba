"""``lre report``: one self-contained page, rendered by a real headless Chromium."""

from __future__ import annotations

import os
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

from tests._support.history import write_history
from tests._support.processes import require_tool
from tests.cli._lre import run_lre


class _Actions(HTMLParser):
    """Collects every ``<g class="action">`` with its target and the text inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.actions: list[dict[str, str]] = []
        self._depth = 0
        self.rendered = ""
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "html":
            self.rendered = values.get("data-rendered-actions", "")
        for key in ("src", "href"):
            if key in values and not values[key].startswith("#"):
                self.external.append(values[key])
        if tag == "g" and values.get("class") == "action":
            self.actions.append({"target": values.get("data-target", ""), "text": ""})
            self._depth = 1
        elif self._depth:
            self._depth += 1

    def handle_endtag(self, tag: str) -> None:
        if self._depth:
            self._depth -= 1

    def handle_data(self, data: str) -> None:
        if self._depth and self.actions:
            self.actions[-1]["text"] += data


def _render(chromium: str, page: Path, profile: Path) -> tuple[str, str]:
    """The DOM after the page's scripts ran, and Chromium's log (console lines)."""
    done = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def test_report_renders_one_labelled_shape_per_action_without_console_errors(
    tmp_path: Path,
) -> None:
    chromium = require_tool("chromium")
    records = write_history(tmp_path / "state")
    env = {**os.environ, "LRE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}
    page = tmp_path / "report.html"
    done = run_lre("report", "last", "-o", str(page), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    source = page.read_text()
    assert "default-src 'none'" in source  # no network, by the page's own policy
    dom, log = _render(chromium, page, tmp_path / "profile")
    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    assert console == []
    parsed = _Actions()
    parsed.feed(dom)
    assert parsed.external == []
    executed = sorted(
        r.target
        for r in records
        if r.source == "executed" and r.invocation == records[-1].invocation
    )
    assert sorted(a["target"] for a in parsed.actions) == executed
    for action in parsed.actions:
        assert action["target"] in action["text"]  # its label and title name it
    assert parsed.rendered == str(len(executed))  # the page's script ran
    assert re.search(r'class="kill-mark"', dom)
    assert dom.count('class="kill-line"') == 2  # each kill where it happened
    assert dom.count('class="series"') == 3  # host CPU, memory in use, reserved memory
    for table in ('id="summary"', 'id="slowest"', 'id="waits"'):
        assert table in dom


def test_a_console_error_is_seen(tmp_path: Path) -> None:
    """The check above can fail: a page with a script error shows up in the log."""
    chromium = require_tool("chromium")
    page = tmp_path / "bad.html"
    page.write_text("<html><body><script>missing_function();</script></body></html>")
    _, log = _render(chromium, page, tmp_path / "profile")
    assert any(":CONSOLE" in line and "missing_function" in line for line in log.splitlines())
