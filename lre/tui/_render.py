"""Render one ``ProcessSnapshot`` as the dashboard (pure: same snapshot, same screen).

Four parts, top to bottom: a header (address, uptime, health, CPU and memory
reserved against the budget as bars, queue, running, completed/s, cache hit
ratio, CAS use, jobserver tokens), the in-flight table (one row per running
action, longest-running first, RSS bar red near the kill line), the queue by
platform, and recent events. Columns are dropped by priority as the width
shrinks and rows are cut to ``height`` (with a "... more" line); any width
from 1 up renders without error.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.constrain import Constrain
from rich.panel import Panel
from rich.segment import Segment, SegmentLines
from rich.table import Table
from rich.text import Text

from lre.snapshot import EventKind, InflightAction, ProcessSnapshot, RecentEvent
from lre.tui._format import bar, cpus, short_bytes, short_duration, usage_style

__all__ = ["render_dashboard", "rss_style"]

#: An action whose RSS reaches this fraction of its kill line shows red.
NEAR_KILL_LINE = 0.9

_EVENT_STYLES = {
    EventKind.KILL: "bold red",
    EventKind.OOM: "bold red",
    EventKind.ESCALATION: "yellow",
    EventKind.FAILURE: "red",
    EventKind.TIMEOUT: "magenta",
    EventKind.UNMATCHABLE: "red",
    EventKind.BACKPRESSURE: "yellow",
    EventKind.WORKER: "bold red",
    EventKind.UPSTREAM: "yellow",
}


def rss_style(action: InflightAction) -> str:
    """Red at ``NEAR_KILL_LINE`` of the kill line, yellow above the reservation,
    green below it; dim when there is no line or no sample yet."""
    if action.rss_bytes is None or action.kill_line_bytes <= 0:
        return "grey50"
    if action.rss_bytes >= NEAR_KILL_LINE * action.kill_line_bytes:
        return "bold red"
    if action.rss_bytes > action.reserved_memory_bytes:
        return "yellow"
    return "green"


# ---------------------------------------------------------------------- header


def _header(snapshot: ProcessSnapshot, width: int) -> RenderableType:
    bar_width = 20 if width >= 100 else 12 if width >= 70 else 6
    lines: list[Text] = []

    top = Text()
    top.append("lre ", style="bold")
    top.append(snapshot.address or "-", style="cyan")
    top.append(f"  up {short_duration(snapshot.uptime_s)}  ")
    if snapshot.healthy:
        top.append("● ok", style="green")
    else:
        top.append("● UNHEALTHY", style="bold red")
    lines.append(top)
    for problem in snapshot.problems:
        lines.append(Text(f"  {problem}", style="red"))

    budget = Text()
    cpu_cap = snapshot.millicpus_capacity
    cpu_frac = snapshot.millicpus_reserved / cpu_cap if cpu_cap else None
    budget.append("CPU ")
    budget.append_text(bar(cpu_frac, bar_width, usage_style(cpu_frac)))
    budget.append(f" {cpus(snapshot.millicpus_reserved)}/{cpus(cpu_cap)}   ")
    mem_cap = snapshot.effective_memory_capacity_bytes
    mem_frac = snapshot.memory_reserved_bytes / mem_cap if mem_cap else None
    budget.append("MEM ")
    budget.append_text(bar(mem_frac, bar_width, usage_style(mem_frac)))
    budget.append(f" {short_bytes(snapshot.memory_reserved_bytes)}/{short_bytes(mem_cap)}")
    lines.append(budget)

    figures = Text()
    ratio = snapshot.cache_hit_ratio
    items = [
        ("queued", str(snapshot.queued)),
        ("running", str(snapshot.running)),
        ("done/s", f"{snapshot.completed_per_second:.1f}"),
        ("done", str(snapshot.completed)),
        (
            "cache hits",
            "-"
            if ratio is None
            else f"{ratio * 100:.0f}% (AC {snapshot.client_get_action_result_hits} + "
            f"exec {snapshot.client_execute_hits})",
        ),
    ]
    for store in snapshot.stores:
        cap = short_bytes(store.max_bytes) if store.max_bytes else "∞"
        items.append((f"CAS {store.name}", f"{short_bytes(store.used_bytes)}/{cap}"))
    if snapshot.jobserver is not None:
        items.append(("tokens", f"{snapshot.jobserver.in_use}/{snapshot.jobserver.total}"))
    for index, (name, value) in enumerate(items):
        if index:
            figures.append("  ")
        figures.append(f"{name} ", style="grey70")
        figures.append(value, style="bold")
    lines.append(figures)
    if snapshot.upstreams:
        lines.append(_upstream_line(snapshot))
    return Panel(Group(*lines), box=box.ROUNDED, padding=(0, 1), width=width)


_STATE_STYLE = {"up": "green", "down": "bold red", "unknown": "grey70"}


def _upstream_line(snapshot: ProcessSnapshot) -> Text:
    """One line for all upstreams: state of each, then the read-through and
    forwarding figures summed over them."""
    line = Text()
    totals: dict[str, int] = {}
    for row in snapshot.upstreams:
        line.append(f"{row.name} ", style="grey70")
        line.append(f"● {row.state}  ", style=_STATE_STYLE.get(row.state, ""))
        for key, count in row.counters.items():
            totals[key] = totals.get(key, 0) + count
    hits, misses = totals.get("ac_hits", 0), totals.get("ac_misses", 0)
    forwarded = sum(
        n for k, n in totals.items() if k.startswith("forwarded_") and k != "forwarded_inflight"
    )
    items = [
        ("hits", f"{hits}/{hits + misses}"),
        ("read", short_bytes(totals.get("read_bytes", 0))),
        ("forwarded", str(forwarded)),
        ("fallbacks", str(totals.get("fell_back_local", 0))),
    ]
    for name, value in items:
        line.append(f"{name} ", style="grey70")
        line.append(value, style="bold")
        line.append("  ")
    line.rstrip()
    return line


# ---------------------------------------------------------------------- in flight


@dataclass(frozen=True, slots=True)
class _Column:
    name: str
    priority: int  # lower = kept longer
    width: int
    justify: str = "left"


_BAR_WIDTH = 10
_COLUMNS = (
    _Column("action", 0, 14),
    _Column("target", 5, 18),
    _Column("worker", 4, 8),
    _Column("elapsed", 0, 7, "right"),
    _Column("rss", 1, 10, "right"),
    _Column("bar", 2, _BAR_WIDTH),
    _Column("peak", 3, 6, "right"),
    _Column("cpu%", 1, 5, "right"),
    _Column("cpus", 6, 4, "right"),
    _Column("step", 7, 4, "right"),
    _Column("try", 7, 3, "right"),
)
_TITLES = {
    "action": "Action",
    "target": "Target",
    "worker": "Worker",
    "elapsed": "Elapsed",
    "rss": "RSS/resv",
    "bar": "Kill line",
    "peak": "Peak",
    "cpu%": "CPU%",
    "cpus": "CPUs",
    "step": "Step",
    "try": "Try",
}


def _fit_columns(width: int) -> list[_Column]:
    """Columns kept at ``width`` (each costs its width plus 3 cells: padding
    and divider, the outer edges excepted), in display order; the action
    column widens into what is left (up to 40), then the target column."""
    kept: set[str] = set()
    used = 0
    width += 3  # no padding or divider outside the first and last column
    for column in sorted(_COLUMNS, key=lambda c: c.priority):
        cost = column.width + 3
        if used + cost <= width or not kept:
            kept.add(column.name)
            used += cost
    spare = max(0, width - used)
    result = []
    for column in _COLUMNS:
        if column.name not in kept:
            continue
        if column.name == "action" and spare:
            grow = min(spare, 40 - column.width)
            column = _Column(column.name, column.priority, column.width + grow, column.justify)
            spare -= grow
        if column.name == "target" and spare:
            grow = min(spare, 24)
            column = _Column(column.name, column.priority, column.width + grow, column.justify)
            spare -= grow
        result.append(column)
    return result


def _cell(action: InflightAction, name: str) -> Text:
    if name == "action":
        label = action.summary + (" ⊘" if action.cancelled else "")
        return Text(label, style="bold" if not action.cancelled else "grey50")
    if name == "target":
        return Text(action.target or "-")
    if name == "worker":
        return Text(action.worker)
    if name == "elapsed":
        return Text(short_duration(action.elapsed_s))
    if name == "rss":
        resv = short_bytes(action.reserved_memory_bytes) if action.reserved_memory_bytes else "-"
        return Text(f"{short_bytes(action.rss_bytes)}/{resv}", style=rss_style(action))
    if name == "bar":
        if action.rss_bytes is None or action.kill_line_bytes <= 0:
            return bar(None, _BAR_WIDTH, "grey50")
        return bar(action.rss_bytes / action.kill_line_bytes, _BAR_WIDTH, rss_style(action))
    if name == "peak":
        return Text(short_bytes(action.peak_rss_bytes))
    if name == "cpu%":
        if action.cpu_millicpus is None:
            return Text("-")
        return Text(f"{action.cpu_millicpus / 10:.0f}")
    if name == "cpus":
        return Text("all" if action.exclusive else cpus(action.reserved_millicpus))
    if name == "step":
        return Text(str(action.ladder_step), style="yellow" if action.ladder_step else "")
    if name == "try":
        return Text(str(action.attempt), style="yellow" if action.attempt > 1 else "")
    raise KeyError(name)


def _inflight(snapshot: ProcessSnapshot, width: int, max_rows: int | None) -> RenderableType:
    """The in-flight table as one Text per line.

    Laid out as a rich ``Table`` with ``box.SIMPLE_HEAD`` would lay out these
    fixed-width, unwrapped, ellipsis-cropped columns (title, header, a rule,
    rows; three cells between columns), but built directly: rich's table
    measures and pads every cell on every frame, ~1.5 ms per row here, which
    at four frames a second cost more CPU than some actions."""
    actions = sorted(snapshot.inflight, key=lambda a: (-a.elapsed_s, a.operation))
    columns = _fit_columns(width)
    if len(columns) == 1 and columns[0].width > width:  # narrower than one column
        columns = [replace(columns[0], width=width)]
    total = sum(c.width for c in columns) + 3 * (len(columns) - 1)
    title = Text(f"In flight ({len(actions)})", style="bold", justify="left")
    header = _row([Text(_TITLES[c.name]) for c in columns], columns, style="bold")
    rule = Text("─" * total, no_wrap=True, overflow="crop")
    lines: list[RenderableType] = [Constrain(title, total), header, rule]
    shown = actions
    hidden = 0
    if max_rows is not None and len(actions) > max_rows:
        keep = max(0, max_rows - 1)
        shown, hidden = actions[:keep], len(actions) - keep
    for action in shown:
        lines.append(_row([_cell(action, c.name) for c in columns], columns))
    if hidden:
        lines.append(_row([Text(f"… {hidden} more", style="grey50")], columns))
    if not actions:
        lines.append(_row([Text("nothing running", style="grey50")], columns))
    return Group(*lines)


def _row(cells: list[Text], columns: list[_Column], style: str = "") -> Text:
    """One table line: ``cells`` cropped and justified to their columns'
    widths, missing trailing cells blank."""
    line = Text(style=style, no_wrap=True, overflow="crop", end="\n")
    for index, column in enumerate(columns):
        if index:
            line.append("   ")
        cell = cells[index].copy() if index < len(cells) else Text()
        cell.truncate(column.width, overflow="ellipsis")
        cell.align(column.justify, column.width)  # type: ignore[arg-type]
        line.append_text(cell)
    return line


# ---------------------------------------------------------------------- queue, events


class _Memo:
    """A renderable drawn by ``build()``, whose rendered lines are kept for
    the next frames with the same ``key`` and console width: the queue and
    event tables change a few times a minute, and rich takes milliseconds
    to lay out a table. ``key`` must determine everything ``build`` draws.
    Up to ``_MEMO_SIZE`` renderings are kept (module-wide, so the dashboard
    of ``lre up`` and of ``lre top`` share it harmlessly)."""

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


def _queued(snapshot: ProcessSnapshot, max_rows: int) -> RenderableType | None:
    if not snapshot.queued_by_platform:
        return None
    items = sorted(snapshot.queued_by_platform.items(), key=lambda kv: (-kv[1], kv[0]))
    return _Memo(("queued", max_rows, tuple(items)), lambda: _queued_table(items, max_rows))


def _queued_table(items: list[tuple[str, int]], max_rows: int) -> RenderableType:
    table = Table(
        box=None,
        padding=(0, 1),
        pad_edge=False,
        show_header=False,
        title=f"Queued by platform ({sum(n for _, n in items)})",
        title_justify="left",
        title_style="bold",
    )
    table.add_column("n", justify="right", no_wrap=True)
    table.add_column("platform", no_wrap=True, overflow="ellipsis")
    shown = items[:max_rows]
    for label, count in shown:
        table.add_row(str(count), label or "(no requirements)")
    if len(items) > len(shown):
        rest = sum(n for _, n in items[len(shown) :])
        table.add_row(str(rest), Text(f"… {len(items) - len(shown)} more platforms", "grey50"))
    return table


def _event_detail(event: RecentEvent) -> str:
    detail = event.message
    if event.peak_rss_bytes is not None:
        detail = f"peak {short_bytes(event.peak_rss_bytes)} · {detail}"
    return detail


def _events(snapshot: ProcessSnapshot, width: int, max_rows: int) -> RenderableType | None:
    events = snapshot.events[:max_rows]
    if not events:
        return None
    wide = width >= 80
    rows = tuple(
        (
            short_duration(snapshot.taken_at - event.at),
            event.kind,
            event.summary or "-",
            event.worker or "-",
            _event_detail(event),
        )
        for event in events
    )
    return _Memo(("events", wide, rows), lambda: _events_table(rows, wide))


def _events_table(rows: tuple[tuple[str, EventKind, str, str, str], ...], wide: bool) -> Table:
    table = Table(
        box=None,
        padding=(0, 1),
        pad_edge=False,
        show_header=False,
        title="Recent events",
        title_justify="left",
        title_style="bold",
    )
    table.add_column("age", justify="right", no_wrap=True, min_width=6)
    table.add_column("kind", no_wrap=True, min_width=12)
    if wide:
        table.add_column("action", no_wrap=True, overflow="ellipsis", min_width=10, max_width=16)
        table.add_column("worker", no_wrap=True, overflow="ellipsis", min_width=6, max_width=10)
    table.add_column("detail", no_wrap=True, overflow="ellipsis")
    for age, kind, summary, worker, detail in rows:
        cells: list[Text | str] = [age, Text(kind.value, style=_EVENT_STYLES.get(kind, ""))]
        if wide:
            cells += [summary, worker]
        cells.append(detail)
        table.add_row(*cells)
    return table


def render_dashboard(
    snapshot: ProcessSnapshot,
    *,
    width: int,
    height: int | None = None,
    notice: str | None = None,
) -> RenderableType:
    """The whole screen for ``snapshot`` at ``width`` columns. ``height`` (rows)
    cuts the in-flight table so the queue and events stay visible; None keeps
    every row. ``notice`` is a line shown on top in red (e.g. "cannot reach lre")."""
    width = max(1, width)
    parts: list[RenderableType] = []
    if notice:
        parts.append(Text(notice, style="bold red"))
    parts.append(_header(snapshot, width))
    events_rows = 6 if height is None or height >= 30 else 3
    queue_rows = 4 if height is None or height >= 30 else 2
    queued = _queued(snapshot, queue_rows)
    events = _events(snapshot, width, events_rows)
    max_rows: int | None = None
    if height is not None:
        # header panel (3 lines + problems + borders), notice, table title/head/rule
        reserved = 5 + len(snapshot.problems) + (1 if notice else 0) + 3
        reserved += 1 if snapshot.upstreams else 0
        if queued is not None:
            platforms = len(snapshot.queued_by_platform)
            reserved += 1 + min(queue_rows, platforms) + (1 if platforms > queue_rows else 0)
        if events is not None:
            reserved += 1 + min(events_rows, len(snapshot.events))
        max_rows = max(1, height - reserved)
    parts.append(_inflight(snapshot, width, max_rows))
    if queued is not None:
        parts.append(queued)
    if events is not None:
        parts.append(events)
    return Group(*parts)
