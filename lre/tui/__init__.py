"""The terminal dashboard: ``render_dashboard`` (one snapshot -> rich renderable),
``run_dashboard`` (live, ~4/s, in-process or over HTTP) and ``RemoteSnapshots``
(``lre top``'s snapshot getter over the status listener)."""

from lre.tui._live import SnapshotGetter, run_dashboard
from lre.tui._remote import RemoteSnapshots, fetch_snapshot_json
from lre.tui._render import UP_FOOTER, render_dashboard, rss_style

__all__ = [
    "UP_FOOTER",
    "RemoteSnapshots",
    "SnapshotGetter",
    "fetch_snapshot_json",
    "render_dashboard",
    "rss_style",
    "run_dashboard",
]
