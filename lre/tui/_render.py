"""Render one ``ProcessSnapshot`` as the dashboard (pure: same snapshot, same screen).

Five parts, top to bottom: a header (address, uptime, health; CPU and memory
reserved against the budget as bars, with the host's CPU % and RAM in use
beside them; the running actions' summed RSS against the memory budget, which
is what the memory control watches, and the hard ceiling; queue, running,
completed/s, cache hit ratio, CAS use, make jobs in use (the jobserver's
tokens); a line per running build and one for the last), the in-flight
table (one row per running action, longest-running first, its RSS as a bar
against its worker's memory budget, red near the hard ceiling), the queue
(by platform; the next actions and what each waits for), recent events
(named by target) and a footer with the keys.

In-flight columns are as wide as their content (Action, Target and Worker
up to a cap) and are dropped by priority as the width shrinks; Target is
always left of Worker and kept longer, and Worker is not shown at all when
one worker runs everything. Rows are cut to ``height`` (with a "... more"
line); any width from 1 up renders without error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rich import box
from rich.console import Group, RenderableType
from rich.constrain import Constrain
from rich.panel import Panel
from rich.text import Text

from lre.snapshot import BuildLine, BuildShareRow, InflightAction, ProcessSnapshot
from lre.tui._format import bar, cpus, short_bytes, short_duration, usage_style
from lre.tui._panes import events_pane, footer, queue_pane, queue_pane_lines

__all__ = ["TOP_FOOTER", "UP_FOOTER", "render_dashboard", "rss_style"]

#: The footer of ``lre top`` (``q`` leaves, lre keeps running).
TOP_FOOTER: tuple[tuple[str, str], ...] = (("q", "quit"), ("Ctrl-C", "quit (lre keeps running)"))
#: The footer of the dashboard in ``lre up`` (it is lre): the same keys stop
#: lre, after the actions it runs or queues, as ``lre down`` does.
UP_FOOTER: tuple[tuple[str, str], ...] = (
    ("q", "stop lre after its running actions"),
    ("Ctrl-C", "the same; twice: cancel them"),
)

#: An action whose RSS reaches this fraction of its kill line shows red.
NEAR_KILL_LINE = 0.9


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

#: From this width on, the host's use shares the line of the reservations.
_ONE_LINE_HOST = 130


def _header(snapshot: ProcessSnapshot, width: int, *, stale: bool = False) -> RenderableType:
    bar_width = 20 if width >= 100 else 12 if width >= 70 else 6
    lines: list[Text] = []

    top = Text()
    top.append("lre ", style="bold")
    top.append(snapshot.address or "-", style="cyan")
    top.append(f"  up {short_duration(snapshot.uptime_s)}  ")
    if stale:  # the figures are the last answer's: lre stopped or does not answer
        top.append("● not answering", style="bold red")
    elif snapshot.healthy:
        top.append("● ok", style="green")
    else:
        top.append("● UNHEALTHY", style="bold red")
    lines.append(top)
    for problem in snapshot.problems:
        lines.append(Text(f"  {problem}", style="red"))

    budget = Text()
    cpu_cap = snapshot.millicpus_capacity
    cpu_frac = snapshot.millicpus_reserved / cpu_cap if cpu_cap else None
    host = snapshot.host
    budget.append("reserved ", style="grey70")
    budget.append("CPU ")
    budget.append_text(bar(cpu_frac, bar_width, usage_style(cpu_frac)))
    budget.append(f" {cpus(snapshot.millicpus_reserved)}/{cpus(cpu_cap)}")
    budget.append("   ")
    mem_cap = snapshot.effective_memory_capacity_bytes
    mem_frac = snapshot.memory_reserved_bytes / mem_cap if mem_cap else None
    budget.append("MEM ")
    budget.append_text(bar(mem_frac, bar_width, usage_style(mem_frac)))
    budget.append(f" {short_bytes(snapshot.memory_reserved_bytes)}/{short_bytes(mem_cap)}")
    if host is not None:
        used = Text()
        used.append("host ", style="grey70")
        used.append("CPU ")
        used.append(f"{host.cpu_percent:.0f}%", style="bold")
        used.append(f" of {host.cpu_count} cores   ", style="grey70")
        used.append("RAM ")
        used.append(short_bytes(host.memory_used_bytes), style="bold")
        used.append(f"/{short_bytes(host.memory_total_bytes)} in use", style="grey70")
        if width >= _ONE_LINE_HOST:
            budget.append("   ")
            budget.append_text(used)
        else:
            lines.append(budget)
            budget = used
    lines.append(budget)
    lines.append(_rss_line(snapshot, bar_width))

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
    if snapshot.jobserver is not None and snapshot.jobserver.total:
        # The jobserver's tokens: extra parallel jobs lent to make/ninja/cargo
        # inside actions (none to lend: not shown).
        jobs = snapshot.jobserver
        items.append(("make jobs" if width >= 80 else "jobs", f"{jobs.in_use}/{jobs.total}"))
    for index, (name, value) in enumerate(items):
        if index:
            figures.append("  ")
        figures.append(f"{name} ", style="grey70")
        figures.append(value, style="bold")
    lines.append(figures)
    if snapshot.upstreams:
        lines.append(_upstream_line(snapshot))
    for build in snapshot.builds:
        lines.append(_build_line(build, snapshot.taken_at, client=width >= 100))
    for share in _shown_shares(snapshot):
        lines.append(_share_line(share, client=width >= 100))
    return Panel(Group(*lines), box=box.ROUNDED, padding=(0, 1), width=width)


#: A capacity this large is no budget (a worker without one offers 2**60 bytes).
_NO_BUDGET = 1 << 59


def _budget(capacity: int) -> int:
    """``capacity`` as a memory budget; 0 when there is none."""
    return capacity if 0 < capacity < _NO_BUDGET else 0


def _rss_line(snapshot: ProcessSnapshot, bar_width: int) -> Text:
    """``actions RSS ███░░ 6.9G/12.0G budget  ceiling 14.4G``: what the running
    actions hold (frozen ones too) against the memory budget (memory is short
    from 90 % of it, where the bar turns red), and the hard ceiling one
    action may not pass (the running actions' kill line)."""
    rss = sum(a.rss_bytes or 0 for a in snapshot.inflight)
    budget = _budget(snapshot.effective_memory_capacity_bytes)
    line = Text()
    line.append("actions ", style="grey70")
    line.append("RSS ")
    if budget:
        fraction = rss / budget
        line.append_text(bar(fraction, bar_width, usage_style(fraction)))
        line.append(f" {short_bytes(rss)}/{short_bytes(budget)} budget")
    else:
        line.append(f"{short_bytes(rss)} (no memory budget)")
    ceiling = max((a.kill_line_bytes for a in snapshot.inflight), default=0)
    if ceiling > 0:
        line.append("   ceiling ", style="grey70")
        line.append(short_bytes(ceiling))
    frozen = sum(1 for a in snapshot.inflight if a.frozen)
    if frozen:
        line.append(f"   {frozen} frozen", style="bold cyan")
    return line


def _shown_shares(snapshot: ProcessSnapshot) -> tuple[BuildShareRow, ...]:
    """The builds' shares, shown while two or more builds are active."""
    return snapshot.build_shares if len(snapshot.build_shares) > 1 else ()


def _share_line(share: BuildShareRow, *, client: bool) -> Text:
    """``share 5f0c3a52 bazel 4.2.3 [app] 50% fair, holds 67%: 2 running 380 queued``."""
    line = Text()
    line.append("share ", style="grey70")
    line.append(share.invocation[:8] or "(no id)", style="cyan")
    if share.tool and client:
        line.append(f" {share.tool}")
    if share.repository:
        line.append(f" [{share.repository}]")
    line.append(f" {share.fair_share:.0%}", style="bold")
    line.append(" fair, holds ", style="grey70")
    line.append(f"{share.used_share:.0%}", style="bold")
    line.append(":", style="grey70")
    for name, value in (("running", share.running), ("queued", share.queued)):
        line.append(f" {value}", style="bold")
        line.append(f" {name}", style="grey70")
    return line


def _build_line(build: BuildLine, now: float, *, client: bool) -> Text:
    """``build [app-1f2e3d4c] 5f0c3a52 bazel 7.1.0 running 35s: 120 run  80 cached
    1 failed  0 killed`` (the repository when the client named one; and ``3
    cancelled`` when some were: stopped, not failed). The time is from the
    build's first request to its last reply, as ``lre builds`` shows it."""
    line = Text()
    line.append("build " if build.running else "last build ", style="grey70")
    if build.repository:
        line.append(f"[{build.repository}] ", style="magenta")
    line.append(build.invocation[:8] or "(no id)", style="cyan")
    if build.client and client:
        line.append(f" {build.client}")
    ended = now if build.running else build.ended_at
    state = "running" if build.running else "took"
    line.append(f" {state} {short_duration(max(0.0, ended - build.started_at))}:", style="grey70")
    for name, value, style in (
        ("run", build.executed, "bold"),
        ("cached", build.cache_hits, "bold"),
        ("failed", build.failed, "bold red" if build.failed else "bold"),
        ("killed", build.killed, "bold yellow" if build.killed else "bold"),
    ):
        line.append(f" {value}", style=style)
        line.append(f" {name}", style="grey70")
    if build.cancelled:
        line.append(f" {build.cancelled}", style="bold")
        line.append(" cancelled", style="grey70")
    return line


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
    title: str
    priority: int  # lower = kept longer
    width: int  # the fixed width, or the cap of a column sized to its content
    justify: str = "left"
    sized: bool = False  # as wide as its widest cell (and title), up to ``width``


_BAR_WIDTH = 10
_MIN_TARGET = 12
_SOFT_TARGET = 28
#: Columns of this priority and above go before a long target label is cut.
_SOFT_CUT_BEFORE = 6
_COLUMNS = (
    _Column("action", "Action", 0, 24, sized=True),
    _Column("target", "Target", 1, 64, sized=True),
    _Column("worker", "Worker", 5, 12, sized=True),
    _Column("elapsed", "Elapsed", 0, 7, "right"),
    _Column("rss", "RSS/resv", 1, 13, "right", sized=True),
    _Column("bar", "RSS/budget", 3, _BAR_WIDTH),
    _Column("peak", "Peak", 4, 6, "right"),
    _Column("cpu%", "CPU%", 2, 5, "right"),
    _Column("cpus", "CPUs", 6, 4, "right"),
    _Column("step", "Step", 7, 4, "right"),
    _Column("try", "Try", 7, 3, "right"),
)


def _content_width(column: _Column, actions: tuple[InflightAction, ...]) -> int:
    if not column.sized:
        return column.width
    widest = max((_cell(a, column.name).cell_len for a in actions), default=1)
    return min(column.width, max(len(column.title), widest))


def _fit_columns(
    width: int, actions: tuple[InflightAction, ...], *, show_worker: bool
) -> list[_Column]:
    """Columns kept at ``width`` (each costs its width plus 3 cells: padding
    and divider, the outer edges excepted), in display order. Sized columns
    take their content's width; when the row is too wide, columns go by
    priority, and the target column narrows (to ``_MIN_TARGET``) before the
    next one would go (a label longer than ``_SOFT_TARGET`` is cut to it
    before any column goes)."""
    candidates = [
        replace(c, width=_content_width(c, actions))
        for c in _COLUMNS
        if show_worker or c.name != "worker"
    ]
    width += 3  # no padding or divider outside the first and last column
    kept = {c.name: c for c in candidates}

    def cost() -> int:
        return sum(c.width + 3 for c in kept.values())

    soft_cut = False
    for column in sorted(candidates, key=lambda c: -c.priority):
        over = cost() - width
        if over <= 0:
            break
        target = kept.get("target")
        if target is not None and not soft_cut and column.priority < _SOFT_CUT_BEFORE:
            # a very long label gives way before a useful column does
            soft_cut = True
            if target.width > _SOFT_TARGET:
                target = kept["target"] = replace(
                    target, width=max(_SOFT_TARGET, target.width - over)
                )
                over = cost() - width
                if over <= 0:
                    break
        if target is None or column.priority > target.priority:
            if len(kept) > 1:  # less important than the target: goes first
                del kept[column.name]
            continue
        if target.width > _MIN_TARGET:
            shrink = min(over, target.width - _MIN_TARGET)
            kept["target"] = replace(target, width=target.width - shrink)
            over -= shrink
            if over <= 0:
                break
        if len(kept) > 1:
            del kept[column.name]
    return [kept[c.name] for c in candidates if c.name in kept]


def _cell(action: InflightAction, name: str, budget: int = 0) -> Text:
    """One cell of ``action``'s row; ``budget`` is its worker's memory budget
    (0: none), what the RSS bar is measured against."""
    if name == "action":
        label = action.summary + (" ⊘" if action.cancelled else "")
        if action.frozen:  # stopped by the memory control until memory frees
            return Text(label + " [frozen]", style="cyan")
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
        if action.rss_bytes is None or budget <= 0:
            return bar(None, _BAR_WIDTH, "grey50")
        return bar(action.rss_bytes / budget, _BAR_WIDTH, rss_style(action))
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
    columns = _fit_columns(width, snapshot.inflight, show_worker=_several_workers(snapshot))
    if len(columns) == 1 and columns[0].width > width:  # narrower than one column
        columns = [replace(columns[0], width=width)]
    total = sum(c.width for c in columns) + 3 * (len(columns) - 1)
    title = Text(f"In flight ({len(actions)})", style="bold", justify="left")
    header = _row([Text(c.title) for c in columns], columns, style="bold")
    rule = Text("─" * total, no_wrap=True, overflow="crop")
    lines: list[RenderableType] = [Constrain(title, total), header, rule]
    shown = actions
    hidden = 0
    if max_rows is not None and len(actions) > max_rows:
        keep = max(0, max_rows - 1)
        shown, hidden = actions[:keep], len(actions) - keep
    budgets = {w.name: _budget(w.memory_capacity_bytes) for w in snapshot.workers}
    overall = _budget(snapshot.effective_memory_capacity_bytes)
    for action in shown:
        budget = budgets.get(action.worker) or overall
        lines.append(_row([_cell(action, c.name, budget) for c in columns], columns))
    if hidden:
        lines.append(_line(Text(f"… {hidden} more", style="grey50"), total))
    if not actions:
        lines.append(_line(Text("nothing running", style="grey50"), total))
    return Group(*lines)


def _line(text: Text, width: int) -> Text:
    """A note across the whole table (not cut to its first column)."""
    line = text.copy()
    line.no_wrap, line.overflow, line.end = True, "crop", "\n"
    line.truncate(max(1, width), overflow="ellipsis")
    return line


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


def _several_workers(snapshot: ProcessSnapshot) -> bool:
    names = {w.name for w in snapshot.workers} | {a.worker for a in snapshot.inflight}
    return len(names) > 1


def render_dashboard(
    snapshot: ProcessSnapshot,
    *,
    width: int,
    height: int | None = None,
    notice: str | None = None,
    keys: tuple[tuple[str, str], ...] = TOP_FOOTER,
) -> RenderableType:
    """The whole screen for ``snapshot`` at ``width`` columns. ``height`` (rows)
    cuts the in-flight table so the queue and events stay visible; None keeps
    every row. ``notice`` is a line shown on top in red (e.g. "cannot reach
    lre"). ``keys`` is what the footer lists (``TOP_FOOTER``, ``UP_FOOTER``;
    empty: no footer)."""
    width = max(1, width)
    parts: list[RenderableType] = []
    if notice:
        parts.append(Text(notice, style="bold red"))
    parts.append(_header(snapshot, width, stale=bool(notice)))
    events_rows = 6 if height is None or height >= 30 else 3
    queue_rows = 4 if height is None or height >= 30 else 2
    queued = queue_pane(snapshot, width, queue_rows)
    events = events_pane(snapshot, width, events_rows, show_worker=_several_workers(snapshot))
    max_rows: int | None = None
    if height is not None:
        # header panel (4 lines + problems + builds + borders), notice,
        # table title/head/rule, footer
        reserved = 6 + len(snapshot.problems) + (1 if notice else 0) + 3 + 1
        reserved += len(snapshot.builds) + len(_shown_shares(snapshot))
        reserved += 1 if snapshot.host is not None and width < _ONE_LINE_HOST else 0
        reserved += 1 if snapshot.upstreams else 0
        reserved += queue_pane_lines(snapshot, queue_rows)
        if events is not None:
            reserved += 1 + min(events_rows, len(snapshot.events))
        # Rows the in-flight table leaves free show more of the queue.
        free = height - reserved - len(snapshot.inflight)
        more = min(free, len(snapshot.queued_next) - queue_rows)
        if more > 0 and snapshot.queued_by_platform:
            queue_rows += more
            reserved += more
            queued = queue_pane(snapshot, width, queue_rows)
        max_rows = max(1, height - reserved)
    parts.append(_inflight(snapshot, width, max_rows))
    if queued is not None:
        parts.append(queued)
    if events is not None:
        parts.append(events)
    if keys:  # `lre stats` prints the screen once: no keys to press
        parts.append(footer(keys, width))
    return Group(*parts)
