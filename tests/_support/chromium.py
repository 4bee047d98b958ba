"""Render a page in a real headless Chromium (Debian's ``chromium``) and read
what its scripts left in the DOM."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

#: Flags for a quiet, offline, throw-away Chromium (a fresh profile each run).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def render_dom(chromium: str, page: Path, profile: Path) -> tuple[str, str]:
    """The DOM after the page's scripts ran, and Chromium's log (console lines)."""
    done = subprocess.run(
        [
            chromium,
            *FLAGS,
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


def drawn_marks(dom: str) -> dict[str, int]:
    """The report's ``data-drawn-*`` counts (``kill-marks``, ``kill-lines``,
    ``cancel-marks``, ``running``, and ``off-frame``: series on a chart's
    frame, time labels cut off), which only its script, run by the browser
    over the laid-out page, sets; fails when the script did not run."""
    html = re.search(r"<html[^>]*>", dom)
    assert html is not None, dom[:500]
    found = {k: int(v) for k, v in re.findall(r'data-drawn-([a-z-]+)="(\d+)"', html.group(0))}
    expected = {"kill-marks", "kill-lines", "cancel-marks", "running", "off-frame"}
    assert set(found) == expected, html.group(0)
    return found
