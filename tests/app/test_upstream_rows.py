"""Upstream health in view: rows from the clients' and forwarders' statistics,
in the snapshot JSON, /metrics (bounded labels), /status and the TUI header."""

from __future__ import annotations

import dataclasses
import json

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from lre.app._metrics import render_metrics
from lre.app._status_http import _status_body
from lre.app._upstreams import upstream_rows
from lre.scheduler import ForwardStatistics
from lre.snapshot import ProcessSnapshot
from lre.tui import render_dashboard
from lre.upstream import UpstreamStatistics
from tests.tui._sample import sample_snapshot


def _stats(name: str, state: str, **counters: int) -> UpstreamStatistics:
    return UpstreamStatistics(
        name=name,
        address=f"grpc://{name}:1",
        state=state,  # type: ignore[arg-type]
        healthy=state != "down",
        calls=10,
        failed_calls=2 if state == "down" else 0,
        retries=1,
        transitions_down=1 if state == "down" else 0,
        last_error="Execute: UNAVAILABLE: gone" if state == "down" else "",
        counters=counters,
    )


def _snapshot() -> ProcessSnapshot:
    forward = ForwardStatistics(
        upstream=_stats("forward", "down"),
        forwarded={"overflow": 3, "unsatisfiable": 1},
        completed_upstream=2,
        failed_upstream=2,
        fell_back_local=1,
        inflight=(),
        fallbacks={"UNAVAILABLE": 1},
        refused={"FAILED_PRECONDITION": 1},
    )
    rows = upstream_rows(
        [_stats("upstream-ac", "up", ac_hits=62, ac_misses=3), _stats("upstream-cas", "unknown")],
        [forward],
    )
    return dataclasses.replace(sample_snapshot(), upstreams=tuple(rows))


def test_rows_carry_state_and_counters_and_survive_json() -> None:
    snapshot = _snapshot()
    names = [row.name for row in snapshot.upstreams]
    assert names == ["upstream-ac", "upstream-cas", "forward"]
    forward = snapshot.upstreams[2]
    assert forward.state == "down" and "UNAVAILABLE" in forward.last_error
    assert forward.counters["forwarded_overflow"] == 3
    assert forward.counters["fallback_UNAVAILABLE"] == 1
    assert forward.counters["refused_FAILED_PRECONDITION"] == 1
    assert forward.counters["fell_back_local"] == 1
    again = ProcessSnapshot.loads(snapshot.dumps())
    assert again == snapshot
    assert json.loads(snapshot.dumps())["upstreams"][0]["counters"]["ac_hits"] == 62


def test_metrics_status_and_header() -> None:
    snapshot = _snapshot()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(render_metrics(snapshot))
        for s in family.samples
    }
    assert samples[("lre_upstream_state", (("state", "down"), ("upstream", "forward")))] == 1
    assert samples[("lre_upstream_state", (("state", "up"), ("upstream", "forward")))] == 0
    key = ("lre_upstream_events_total", (("counter", "ac_hits"), ("upstream", "upstream-ac")))
    assert samples[key] == 62
    key = (
        "lre_upstream_events_total",
        (("counter", "forwarded_overflow"), ("upstream", "forward")),
    )
    assert samples[key] == 3
    assert samples[("lre_upstream_forwarded_inflight", (("upstream", "forward"),))] == 0
    assert samples[("lre_upstream_failed_calls_total", (("upstream", "forward"),))] == 2

    code, _, body = _status_body(snapshot)
    assert code == 200  # an upstream being down does not make lre unhealthy
    status = json.loads(body)
    assert [u["state"] for u in status["upstreams"]] == ["up", "unknown", "down"]

    console = Console(width=140, record=True, color_system=None)
    console.print(render_dashboard(snapshot, width=140))
    text = console.export_text()
    assert "forward ● down" in text and "upstream-ac ● up" in text
    assert "hits 62/65" in text and "forwarded 4" in text and "fallbacks 1" in text
