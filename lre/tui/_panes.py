"""The dashboard's lower panes: the queue (by platform, the next actions and
what each waits for), recent events (named by target; the memory control's
freezes, thaws and kills among them), and the keys footer.

Each pane is drawn once per content and width (``Memo``) and reused by the
next frames: they change a few times a second at most, and rich takes
milliseconds to lay out a table.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment, SegmentLines
from rich.table import Table
from rich.text import Text

from lre.snapshot import WAIT_TEXT, EventKind, ProcessSnapshot, RecentEvent
from lre.tui._format import short_bytes, short_duration

__all__ = ["events_pane", "footer", "queue_pane", "queue_pane_lines"]

_EVENT_STYLES = {
    EventKind.KILL: "bold red",
    EventKind.FREEZE: "cyan",
    EventKind.THAW: "green",
    EventKind.OOM: "bold red",
    EventKind.ESCALATION: "yellow",
    EventKind.FAILURE: "red",
    EventKind.TIMEOUT: "magenta",
    EventKind.UNMATCHABLE: "red",
    EventKind.BACKPRESSURE: "yellow",
    EventKind.WORKER: "bold red",
    EventKind.UPSTREAM: "yellow",
}


class Memo:
    """A renderable drawn by ``build()``, whose rendered lines are kept for
    the next frames with the same ``key`` and console width. ``key`` must
    determine everything ``build`` draws. Up to ``_MEMO_SIZE`` renderings are
    kept (module-wide, so the dashboards of ``lre up`` and ``lre top`` share
    it harmlessly)."""

    def __init__(self, key: Hashable, build: Callable[[], RenderableType]) -> None:
        self._key = key
        self._build = build

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        key = (self._key, options.max_width, console.color_system, options.ascii_only)
        lines = _MEMO.pop(key, None)
        if lines is None:
            lines = console.render_lines(self._build(), options, pad=False)
        _MEMO[key] = lines  # most recent last
        while len(_MEMO) > _MEMO_SIZE:
            del _MEMO[next(iter(_MEMO))]
        yield SegmentLines(lines, new_lines=True)


_MEMO_SIZE = 8
_MEMO: dict[Hashable, list[list[Segment]]] = {}


# ---------------------------------------------------------------------- queue


def _waits(reason: str) -> str:
    return f"waits for {WAIT_TEXT.get(reason, reason)}" if reason else "next in line"


def queue_pane_lines(snapshot: ProcessSnapshot, max_rows: int) -> int:
    """How many lines ``queue_pane`` takes (0 when nothing is queued)."""
    if not snapshot.queued_by_platform:
        return 0
    return 1 + min(max_rows, len(snapshot.queued_next))


def queue_pane(snapshot: ProcessSnapshot, width: int, max_rows: int) -> RenderableType | None:
    """``Queued 42: OSFamily=linux 39 · OSFamily=windows 3`` and the next
    ``max_rows`` queued actions: target, mnemonic, time queued, what it waits for."""
    if not snapshot.queued_by_platform:
        return None
    platforms = sorted(snapshot.queued_by_platform.items(), key=lambda kv: (-kv[1], kv[0]))
    total = sum(n for _, n in platforms)
    title = f"Queued {total}: " + " · ".join(f"{p or 'any'} {n}" for p, n in platforms)
    rows = tuple(
        (
            q.target or "-",
            q.summary,
            short_duration(q.queued_s),
            _waits(q.waiting_for),
            q.platform if len(platforms) > 1 else "",
        )
        for q in snapshot.queued_next[:max_rows]
    )
    return Memo(("queue", title, rows, width >= 80), lambda: _queue_table(title, rows, width >= 80))


def _queue_table(
    title: str, rows: tuple[tuple[str, str, str, str, str], ...], wide: bool
) -> RenderableType:
    table = _titled_table(title)
    table.add_column("target", no_wrap=True, overflow="ellipsis", ratio=3)
    table.add_column("action", no_wrap=True, overflow="ellipsis", max_width=16)
    table.add_column("queued", justify="right", no_wrap=True)
    table.add_column("waits", no_wrap=True, overflow="ellipsis", style="yellow")
    if wide:
        table.add_column("platform", no_wrap=True, overflow="ellipsis", style="grey50")
    for target, summary, queued, waits, platform in rows:
        cells = [target, summary, queued, waits]
        if wide:
            cells.append(platform)
        table.add_row(*cells)
    return Group(table) if rows else Text(title, style="bold", no_wrap=True, overflow="ellipsis")


# ---------------------------------------------------------------------- events


def _event_detail(event: RecentEvent) -> str:
    """The message after the peak; a leading ``<mnemonic> <target>: `` loses
    the target, which the row shows already (the RSS and reason matter more)."""
    detail = event.message
    label = " ".join(p for p in (event.summary, event.target) if p)
    if event.target and detail.startswith(f"{label}: "):
        rest = detail[len(label) + 2 :]
        detail = f"{event.summary}: {rest}" if event.summary else rest
    if event.peak_rss_bytes is not None:
        detail = f"peak {short_bytes(event.peak_rss_bytes)} · {detail}"
    return detail


def events_pane(
    snapshot: ProcessSnapshot, width: int, max_rows: int, *, show_worker: bool
) -> RenderableType | None:
    events = snapshot.events[:max_rows]
    if not events:
        return None
    rows = tuple(
        (
            short_duration(snapshot.taken_at - event.at),
            event.kind,
            event.target or event.summary or "-",
            event.worker or "-",
            _event_detail(event),
        )
        for event in events
    )
    if width < 80:
        return _narrow_events(rows, width)
    key = ("events", show_worker, rows)
    return Memo(key, lambda: _events_table(rows, show_worker))


def _narrow_events(rows: tuple[tuple[str, EventKind, str, str, str], ...], width: int) -> Group:
    """Below 80 columns: kind, target and detail (no age or worker); the
    target stays, since two genrules differ only by it."""
    kind_width = max(len(row[1].value) for row in rows)
    name_width = min(_NARROW_EVENT_TARGET, max(len(row[2]) for row in rows))
    lines: list[RenderableType] = [Text("Recent events", style="bold")]
    for _, kind, name, _, detail in rows:
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(kind.value.ljust(kind_width), style=_EVENT_STYLES.get(kind, ""))
        cell = Text(name)
        cell.truncate(name_width, overflow="ellipsis", pad=True)
        line.append("  ")
        line.append_text(cell)
        line.append("  " + detail)
        line.truncate(max(1, width), overflow="ellipsis")
        lines.append(line)
    return Group(*lines)


#: The target column of the events is at least this wide when a target is that long.
_EVENT_TARGET_MIN = 24
#: Below 80 columns the events keep kind, target (up to this) and detail.
_NARROW_EVENT_TARGET = 20


def _events_table(
    rows: tuple[tuple[str, EventKind, str, str, str], ...], show_worker: bool
) -> Table:
    """From 80 columns: age, kind, target, the worker (``show_worker``) and detail."""
    name_width = min(_EVENT_TARGET_MIN, max(len(row[2]) for row in rows))
    table = _titled_table("Recent events", expand=True)
    table.add_column("age", justify="right", no_wrap=True, min_width=6)
    table.add_column("kind", no_wrap=True, min_width=12)
    table.add_column(
        "target", no_wrap=True, overflow="ellipsis", min_width=name_width, max_width=32
    )
    if show_worker:
        worker_width = min(10, max(len(row[3]) for row in rows))
        table.add_column(
            "worker", no_wrap=True, overflow="ellipsis", min_width=worker_width, max_width=10
        )
    # ratio: the detail takes what is left, so a long message never squeezes
    # the other columns away
    table.add_column("detail", no_wrap=True, overflow="ellipsis", ratio=1)
    for age, kind, name, worker, detail in rows:
        cells: list[Text | str] = [age, Text(kind.value, style=_EVENT_STYLES.get(kind, "")), name]
        if show_worker:
            cells.append(worker)
        cells.append(detail)
        table.add_row(*cells)
    return table


def _titled_table(title: str, *, expand: bool = False) -> Table:
    """A borderless table without a header, ``title`` in bold on its left."""
    return Table(
        box=None,
        padding=(0, 1),
        pad_edge=False,
        show_header=False,
        title=title,
        title_justify="left",
        title_style="bold",
        expand=expand,
    )


# ---------------------------------------------------------------------- footer


def footer(keys: tuple[tuple[str, str], ...], width: int) -> Text:
    """``q quit  Ctrl-C …`` as one line, cut at ``width``."""
    line = Text(no_wrap=True, overflow="ellipsis")
    for index, (key, what) in enumerate(keys):
        if index:
            line.append("  ")
        line.append(f" {key} ", style="reverse")
        line.append(f" {what}")
    line.truncate(max(1, width), overflow="ellipsis")
    return line
