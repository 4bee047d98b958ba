"""The terminal dashboard: ``render_dashboard`` (one snapshot -> rich renderable),
``run_dashboard`` (live, ~4/s, in-process or over HTTP) and ``RemoteSnapshots``
(``lre top``'s snapshot getter over the status listener)."""

from lre.tui._live import run_dashboard
from lre.tui._remote import RemoteSnapshots, fetch_snapshot_json
from lre.tui._render import UP_FOOTER, render_dashboard

__all__ = [
    "UP_FOOTER",
    "RemoteSnapshots",
    "fetch_snapshot_json",
    "render_dashboard",
    "run_dashboard",
]
