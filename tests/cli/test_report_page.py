"""``lre report``: one self-contained page, rendered by a real headless Chromium."""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

from lre.snapshot import HistoryFile, HostSample
from tests._support.chromium import drawn_marks, render_dom
from tests._support.history import (
    CANCELLED_BUILD,
    KILLED_BUILD,
    action,
    write_history,
    write_killed_and_cancelled,
)
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
    dom, log = render_dom(chromium, page, tmp_path / "profile")
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
    for shape in parsed.actions:
        assert shape["target"] in shape["text"]  # its label and title name it
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
    _, log = render_dom(chromium, page, tmp_path / "profile")
    assert any(":CONSOLE" in line and "missing_function" in line for line in log.splitlines())


def _page(tmp_path: Path, env: dict[str, str], build: str) -> tuple[str, str]:
    page = tmp_path / f"{build}.html"
    done = run_lre("report", build, "-o", str(page), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    dom, _ = render_dom(require_tool("chromium"), page, tmp_path / f"profile-{build}")
    return page.read_text(), dom


def _summary_row(dom: str, name: str) -> str:
    """The value of the summary row whose name starts with ``name``."""
    found = re.search(rf"<tr><th>{re.escape(name)}[^<]*</th><td>([^<]*)</td></tr>", dom)
    assert found is not None, name
    return found.group(1)


def test_a_killed_build_draws_each_kill_with_its_run_and_says_why(tmp_path: Path) -> None:
    write_killed_and_cancelled(tmp_path / "state")
    env = {**os.environ, "LRE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}
    _, dom = _page(tmp_path, env, KILLED_BUILD[:8])
    # drawn by the browser: a triangle on each killed action, a line at each
    # kill, every run's running part (the action killed for good included)
    assert drawn_marks(dom) == {
        "kill-marks": 2,
        "kill-lines": 2,
        "cancel-marks": 0,
        "running": 3,
        "off-frame": 0,
    }
    assert dom.count('data-outcome="killed"') == 1
    assert _summary_row(dom, "killed for their memory") == "2"
    assert _summary_row(dom, "run again by lre after a kill (memory ladder)") == "1"
    assert _summary_row(dom, "failed") == "1"  # the one lre gave up on: exit 137
    assert _summary_row(dom, "cancelled (by the client") == "0"
    killed = dom[dom.index('<table id="killed">') :]
    killed = killed[: killed.index("</table>")]
    assert "over the hard ceiling" in killed and "gave up" in killed
    assert "host MemAvailable under the hard floor" in killed and "ran it again" in killed
    assert "650.0 MiB" in killed
    shown = run_lre("builds", "show", KILLED_BUILD[:8], cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "killed     2 for their memory (lre ran 1 of them again" in shown.stdout
    assert "gave up" in shown.stdout and "over the hard ceiling" in shown.stdout


def test_a_cancelled_build_is_drawn_and_counted_as_cancelled_not_failed(tmp_path: Path) -> None:
    write_killed_and_cancelled(tmp_path / "state")
    env = {**os.environ, "LRE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}
    _, dom = _page(tmp_path, env, CANCELLED_BUILD[:8])
    assert drawn_marks(dom) == {
        "kill-marks": 0,
        "kill-lines": 0,
        "cancel-marks": 2,
        "running": 1,
        "off-frame": 0,
    }
    assert dom.count('data-outcome="cancelled"') == 2
    assert _summary_row(dom, "failed") == "0"
    assert _summary_row(dom, "cancelled (by the client") == "4"
    assert _summary_row(dom, "not run") == "2"
    listed = run_lre("builds", "--json", cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    (build,) = [b for b in json.loads(listed.stdout) if b["invocation"] == CANCELLED_BUILD]
    assert (build["failed"], build["cancelled"], build["not_run"]) == (0, 4, 2)
    history = run_lre("history", "--build", CANCELLED_BUILD[:8], cwd=tmp_path, env=env)
    assert history.returncode == 0, history.stderr
    assert history.stdout.count("cancelled") == 4


def test_charts_keep_off_their_frame_memory_is_scaled_to_the_budget_and_no_label_is_cut(
    tmp_path: Path,
) -> None:
    """CPU at 100 % and at 0 % stays inside the chart's frame, the last time
    label ends on the page, and memory is drawn against lre's budget, not all
    of the host's RAM (the samples record it)."""
    state = tmp_path / "state"
    t0 = 1_800_000_000.0
    records = [action(1, t0, slot_seconds=123.0)]
    samples = [
        HostSample(t0 + i, 100.0 if i % 2 else 0.0, 3 << 30, 64 << 30, 2000, 1 << 30, 1, 2 << 30)
        for i in range(120)
    ]
    history = HistoryFile(state, 1 << 20)
    lines = [json.dumps(r.to_json()) for r in records] + [json.dumps(s.to_json()) for s in samples]
    history.append(lines)
    history.close()
    env = {**os.environ, "LRE_HOME": str(state), "HOME": str(tmp_path)}
    source, dom = _page(tmp_path, env, "last")
    assert drawn_marks(dom)["off-frame"] == 0
    assert "Memory (MiB of lre&#x27;s 2048 MiB budget; host RAM 65536 MiB)" in source
    memory = re.search(r'aria-label="Memory[^"]*".*?</svg>', source)
    assert memory is not None and ">2048</text>" in memory.group(0)
