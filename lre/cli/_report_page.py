"""A build as one self-contained HTML page: ``lre report``.

What the page shows is in docs/observability.md, "Trace and report".
Everything is inline (SVG drawn here, the stylesheet and one small script)
and a Content-Security-Policy forbids any network access, so the page works
offline. What its tests read: one ``<g class="action">`` per executed action
(``data-target``, ``data-kills``, ``data-outcome``: ``ok``, ``failed``,
``killed`` or ``cancelled``), and the ``data-drawn-*`` attributes into which
the script counts the marks that were really drawn.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Sequence

from lre.cli._build_data import BuildData, slot_actions
from lre.snapshot import WAIT_TEXT, ActionRecord, HostSample, Phase

__all__ = ["report_html"]

_WIDTH = 1100
_LANE = 22
_LEFT = 70
#: Where a chart's plot starts below its frame's top edge (the title is above).
_PLOT_TOP = 24
_COLOURS = {
    Phase.STAGING: "#f2b134",
    Phase.RUNNING: "#3a7bd5",
    Phase.STORING: "#7cc47f",
}

_STYLE = """
body{font:14px system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:24px}
table{border-collapse:collapse}td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
svg text{font:11px system-ui,sans-serif}
.lane{fill:#f6f6f6}.label{fill:#fff;pointer-events:none}
.action:hover rect{stroke:#000;stroke-width:1}
.kill-mark{fill:#d62728}.cancel-mark{stroke:#555;stroke-width:2;fill:none}
#details{min-height:1.5em;color:#444}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
"""

_SCRIPT = """
(function () {
  var details = document.getElementById('details');
  var actions = document.querySelectorAll('g.action');
  actions.forEach(function (g) {
    g.addEventListener('mouseenter', function () {
      details.textContent = g.getAttribute('data-details');
    });
  });
  document.documentElement.setAttribute('data-rendered-actions', String(actions.length));
  var timeline = document.getElementById('timeline');
  var width = timeline ? timeline.width.baseVal.value : 0;
  var height = timeline ? timeline.height.baseVal.value : 0;
  function drawn(selector) {
    var count = 0;
    document.querySelectorAll(selector).forEach(function (shape) {
      var box = shape.getBBox();
      var sized = box.width > 0 || box.height > 0;
      var inside = box.x >= 0 && box.y >= 0 && box.x <= width && box.y + box.height <= height;
      if (sized && inside && box.width + box.height >= 4) { count += 1; }
    });
    return String(count);
  }
  var root = document.documentElement;
  root.setAttribute('data-drawn-kill-marks', drawn('#timeline .kill-mark'));
  root.setAttribute('data-drawn-kill-lines', drawn('#timeline .kill-line'));
  root.setAttribute('data-drawn-cancel-marks', drawn('#timeline .cancel-mark'));
  root.setAttribute('data-drawn-running', drawn('#timeline .phase.running'));
  // What is drawn on a chart's frame or past the page's edge (0 when none):
  // a series touching its lane's top or bottom edge, a time label cut off.
  var off = 0;
  document.querySelectorAll('svg.chart').forEach(function (svg) {
    var lane = svg.querySelector('rect.lane').getBBox();
    svg.querySelectorAll('polyline.series').forEach(function (line) {
      var box = line.getBBox();
      if (box.y < lane.y + 1 || box.y + box.height > lane.y + lane.height - 1) { off += 1; }
    });
  });
  document.querySelectorAll('#timeline text.tick').forEach(function (label) {
    var box = label.getBBox();
    if (box.x < 0 || box.x + box.width > width) { off += 1; }
  });
  root.setAttribute('data-drawn-off-frame', String(off));
})();
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _ms(seconds: float) -> str:
    if seconds >= 10:
        return f"{seconds:.1f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1000:.1f} ms"


def _mib(count: int) -> str:
    return f"{count / 2**20:.1f} MiB"


def _outcome(record: ActionRecord) -> str:
    """How ``record`` ended, for ``data-outcome``."""
    if record.cancelled:
        return "cancelled"
    if record.kill_ended:
        return "killed"
    return "failed" if record.failed else "ok"


def _ended(record: ActionRecord) -> str:
    """The end of an action's details: its exit, and what lre did to it."""
    if record.cancelled:
        return "cancelled (by its client or lre's shutdown; not a failure)"
    text = f"exit {record.exit_code if record.exit_code is not None else record.error or '-'}"
    if record.kills:
        why = f" ({record.kill_reason})" if record.kill_reason else ""
        text += f"; killed {record.kills} time(s) for its memory{why}"
        if record.memory_retries:
            text += f", run again by lre {record.memory_retries} time(s) one ladder step up"
        if record.kill_ended:
            text += "; lre gave up on it (not run again)"
    if record.retries:
        text += f"; {record.retries} retry(ies) by lre after an infrastructure failure"
    return text


def _peak(count: int, source: str) -> str:
    """A memory figure and where it came from (``lre.snapshot.MEMORY_*``)."""
    from lre.snapshot import MEMORY_BELOW_IMAGE

    if source == MEMORY_BELOW_IMAGE:
        return "below lre's own size (kernel rusage; it ended before its first sample)"
    return f"{_mib(count)} ({source})" if source else _mib(count)


def _timeline(build: BuildData) -> str:
    slotted = slot_actions(build.actions)
    origin = build.origin
    span = max(build.summary.duration_s, max((s.end - origin for s in slotted), default=0), 1e-3)
    scale = (_WIDTH - _LEFT - 10) / span
    lanes = max((s.slot for s in slotted), default=-1) + 1
    height = lanes * _LANE + 24
    parts = [
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" '
        f'height="{height}" role="img" aria-label="timeline of {len(slotted)} actions">'
    ]
    for lane in range(lanes):
        y = lane * _LANE
        parts.append(
            f'<rect class="lane" x="{_LEFT}" y="{y}" width="{_WIDTH - _LEFT - 10}" '
            f'height="{_LANE - 2}"/><text x="4" y="{y + 15}">slot {lane + 1}</text>'
        )
    for tick in range(6):
        seconds = span * tick / 5
        x = _LEFT + seconds * scale
        # The last label ends at the lane's right edge instead of running off the page.
        anchor = "end" if tick == 5 else "middle"
        parts.append(
            f'<text class="tick" x="{x:.1f}" y="{height - 6}" text-anchor="{anchor}">'
            f"{_ms(seconds)}</text>"
        )
    for index, placed in enumerate(slotted):
        record = placed.record
        y = placed.slot * _LANE
        x = _LEFT + (placed.start - origin) * scale
        width = max(1.0, (placed.end - placed.start) * scale)
        label = record.target or record.mnemonic or record.action[:12]
        phases = ", ".join(f"{s.phase.value} {_ms(s.seconds)}" for s in record.spans)
        detail = (
            f"{record.name}: {phases}; "
            f"peak {_peak(record.peak_rss_bytes, record.memory_source)}, {_ended(record)}"
        )
        if record.waited_for:
            detail += "; waited for " + ", ".join(WAIT_TEXT.get(r, r) for r in record.waited_for)
        parts.append(
            f'<g class="action" data-target="{_e(record.target)}" '
            f'data-mnemonic="{_e(record.mnemonic)}" data-kills="{record.kills}" '
            f'data-outcome="{_outcome(record)}" '
            f'data-details="{_e(detail)}" aria-label="{_e(label)}">'
            f"<title>{_e(detail)}</title>"
            f'<clipPath id="c{index}"><rect x="{x:.1f}" y="{y}" width="{width:.1f}" '
            f'height="{_LANE - 2}"/></clipPath>'
            f'<rect class="action-shape" x="{x:.1f}" y="{y}" width="{width:.1f}" '
            f'height="{_LANE - 2}" fill="#9aa"/>'
        )
        for phase_span in record.spans:
            colour = _COLOURS.get(phase_span.phase)
            if colour is None:
                continue
            px = _LEFT + (phase_span.start - origin) * scale
            pw = max(0.5, phase_span.seconds * scale)
            parts.append(
                f'<rect class="phase {phase_span.phase.value}" x="{px:.1f}" y="{y}" '
                f'width="{pw:.1f}" height="{_LANE - 2}" fill="{colour}"/>'
            )
        parts.append(
            f'<text class="label" x="{x + 3:.1f}" y="{y + 14}" '
            f'clip-path="url(#c{index})">{_e(label)}</text>'
        )
        if record.kills:
            parts.append(
                f'<path class="kill-mark" d="M{x:.1f} {y}l6 0l-6 8z">'
                f"<title>{_e(_ended(record))}</title></path>"
            )
        if record.cancelled:
            end = x + width
            parts.append(
                f'<path class="cancel-mark" d="M{end - 7:.1f} {y + 3}l6 12m0 -12l-6 12">'
                "<title>cancelled</title></path>"
            )
        parts.append("</g>")
    for record in build.actions:
        for killed in record.killed_at:  # the moment an attempt was killed, across all lanes
            x = _LEFT + max(0.0, killed - origin) * scale
            parts.append(
                f'<line class="kill-line" x1="{x:.1f}" x2="{x:.1f}" y1="0" '
                f'y2="{lanes * _LANE}" stroke="#d62728" stroke-dasharray="3 2">'
                f"<title>{_e(record.name)} killed for its memory</title></line>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _chart(
    samples: Sequence[HostSample],
    origin: float,
    span: float,
    title: str,
    series: list[tuple[str, str, list[float]]],
    top: float,
) -> str:
    height = 120
    scale = (_WIDTH - _LEFT - 10) / max(span, 1e-3)
    parts = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" '
        f'height="{height + 20}" role="img" aria-label="{_e(title)}">'
        f'<rect class="lane" x="{_LEFT}" y="0" width="{_WIDTH - _LEFT - 10}" height="{height}"/>'
        f'<text x="4" y="14">{_e(title)}</text><text x="4" y="{height}">0</text>'
        f'<text x="4" y="{_PLOT_TOP + 4}">{top:.0f}</text>'
    ]
    top = max(top, 1e-9)
    # The plot keeps off the frame: 100 % is drawn _PLOT_TOP below the lane's
    # top edge (under the title), 0 two pixels above its bottom edge.
    plot = height - _PLOT_TOP - 2
    for name, colour, values in series:
        points = " ".join(
            f"{_LEFT + (s.at - origin) * scale:.1f},{height - 2 - min(v, top) / top * plot:.1f}"
            for s, v in zip(samples, values, strict=True)
        )
        parts.append(
            f'<polyline class="series" data-series="{_e(name)}" fill="none" '
            f'stroke="{colour}" stroke-width="1.5" points="{points}"/>'
        )
    legend = " · ".join(f'<tspan fill="{c}">{_e(n)}</tspan>' for n, c, _ in series)
    parts.append(f'<text x="{_LEFT}" y="{height + 16}">{legend}</text></svg>')
    return "".join(parts)


def _resources(build: BuildData) -> str:
    samples = build.samples
    if not samples:
        return "<p>No host samples were taken during this build.</p>"
    origin = build.origin
    span = max(build.summary.duration_s, samples[-1].at - origin)
    cpu = _chart(
        samples,
        origin,
        span,
        "CPU (% of the host; reserved CPUs x 100 / cores is not shown, see the table)",
        [
            ("host CPU %", "#3a7bd5", [s.cpu_percent for s in samples]),
        ],
        100.0,
    )
    total = max(s.memory_total_bytes for s in samples) / 2**20
    budget = max(s.memory_budget_bytes for s in samples) / 2**20
    # Scaled to lre's memory budget (what its reservations count against; the
    # host's use above it is drawn at the top), else to all of the host's RAM.
    memory = _chart(
        samples,
        origin,
        span,
        f"Memory (MiB of lre's {budget:.0f} MiB budget; host RAM {total:.0f} MiB)"
        if budget
        else f"Memory (MiB of {total:.0f})",
        [
            ("host in use", "#d62728", [s.memory_used_bytes / 2**20 for s in samples]),
            ("reserved by lre", "#7cc47f", [s.reserved_memory_bytes / 2**20 for s in samples]),
        ],
        budget or total,
    )
    return cpu + memory


def _summary_table(build: BuildData) -> str:
    s = build.summary
    rows = [
        ("build (tool invocation id)", s.invocation or "(no id)"),
        ("repository", s.repository or "-"),
        ("client", s.client or "?"),
        ("instance", s.instance or "?"),
        ("duration (first request to last reply)", _ms(s.duration_s)),
        *(
            [("cut short", "lre stopped during this build without ending it (kill -9, a crash)")]
            if s.cut_short
            else []
        ),
        ("actions executed", s.executed),
        ("served from the cache (Execute)", s.execute_hits),
        ("served from the cache (GetActionResult)", s.lookup_hits),
        ("failed", s.failed),
        ("cancelled (by the client or lre's shutdown)", s.cancelled),
        ("not run", s.not_run),
        ("killed for their memory", s.killed),
        ("run again by lre after a kill (memory ladder)", s.memory_retried),
        ("retried by lre (infrastructure)", s.retried),
        ("re-submitted by the client", s.resubmitted),
        ("frozen", s.frozen),
        ("queue wait p50 / p95", f"{_ms(s.queue_p50_s)} / {_ms(s.queue_p95_s)}"),
        ("lre's own time per action", _ms(s.lre_per_action_s)),
        ("peak memory of one action", _peak(s.peak_rss_bytes, s.peak_memory_source)),
    ]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f'<table id="summary">{body}</table>'


def _slowest_table(build: BuildData) -> str:
    rows = "".join(
        f"<tr><td>{_e(r.target or '?')}</td><td>{_e(r.mnemonic)}</td>"
        f'<td class="n">{_ms(r.wall_seconds)}</td>'
        f'<td class="n">{_ms(r.phase_seconds(Phase.QUEUED))}</td>'
        f'<td class="n">{_ms(r.phase_seconds(Phase.RUNNING))}</td>'
        f'<td class="n">{_e(_peak(r.peak_rss_bytes, r.memory_source))}</td></tr>'
        for r in build.summary.slowest
    )
    return (
        '<table id="slowest"><tr><th>target</th><th>mnemonic</th><th>wall</th>'
        f"<th>queued</th><th>running</th><th>peak memory</th></tr>{rows}</table>"
    )


def _killed_table(build: BuildData) -> str:
    killed = build.summary.killed_actions
    if not killed:
        return "<p>lre killed no action for its memory.</p>"
    rows = "".join(
        f"<tr><td>{_e(r.target or '?')}</td><td>{_e(r.mnemonic)}</td>"
        f'<td class="n">{_ms(r.phase_seconds(Phase.RUNNING))}</td>'
        f'<td class="n">{_mib(r.peak_rss_bytes)}</td><td class="n">{r.kills}</td>'
        f"<td>{'gave up' if r.kill_ended else 'ran it again'}</td>"
        f"<td>{_e(r.kill_reason or '-')}</td></tr>"
        for r in killed
    )
    return (
        '<table id="killed"><tr><th>target</th><th>mnemonic</th><th>running</th>'
        f"<th>peak RSS</th><th>kills</th><th>lre</th><th>why</th></tr>{rows}</table>"
    )


def _waits_table(build: BuildData) -> str:
    counts: Counter[str] = Counter()
    for record in build.actions:
        counts.update(record.waited_for)
    if not counts:
        return "<p>No action waited for resources.</p>"
    rows = "".join(
        f'<tr><td>{_e(WAIT_TEXT.get(r, r))}</td><td class="n">{n}</td></tr>'
        for r, n in counts.most_common()
    )
    return f'<table id="waits"><tr><th>waited for</th><th>actions</th></tr>{rows}</table>'


def report_html(build: BuildData) -> str:
    """The whole page; see the module docstring."""
    s = build.summary
    legend = "".join(f'<span style="background:{c}"></span>{p.value}' for p, c in _COLOURS.items())
    title = f"lre build {s.invocation or '(no id)'}"
    if s.repository:
        title += f" of {s.repository}"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{_e(title)}</h1>"
        f"<p>{s.executed} executed, {s.cache_hits} from the cache, {s.failed} failed, "
        f"{s.cancelled} cancelled, {s.not_run} not run, {s.killed} killed for their memory, "
        f"in {_ms(s.duration_s)}.</p>"
        f'<h2>Timeline</h2><p class="legend">{legend}'
        '<span style="background:#d62728"></span>killed for its memory'
        '<span style="background:#555"></span>cancelled</p>'
        f'{_timeline(build)}<p id="details"></p>'
        f"<h2>CPU and memory</h2>{_resources(build)}"
        f"<h2>Summary</h2>{_summary_table(build)}"
        f"<h2>Slowest actions</h2>{_slowest_table(build)}"
        f"<h2>Killed for their memory</h2>{_killed_table(build)}"
        f"<h2>What actions waited for</h2>{_waits_table(build)}"
        f"<script>{_SCRIPT}</script></body></html>\n"
    )
