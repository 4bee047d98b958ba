"""Prometheus text exposition (format 0.0.4) of a ``ProcessSnapshot``.

``render_metrics(snapshot, rpc)`` returns the whole ``/metrics`` body. Every
label's values come from a bounded set, listed in docs/observability.md
("Metrics"): a label per action digest would make one series per action, so
per-action data (RSS, elapsed, digests, operation names) is aggregated per
worker or left to ``/api/v1/stats``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping

from lre.app._process_metrics import phase_lines, process_lines
from lre.service import RpcStatistics
from lre.snapshot import ProcessSnapshot, StoreRow, WorkerRow

__all__ = ["CONTENT_TYPE", "platform_key_set", "render_metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = Mapping[str, str]
Sample = tuple[Labels, float]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(
        self, name: str, kind: str, help_text: str, samples: Iterable[Sample], suffix: str = ""
    ) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            self.sample(name + suffix, labels, value)

    def sample(self, name: str, labels: Labels, value: float) -> None:
        if labels:
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            self.lines.append(f"{name}{{{text}}} {_number(value)}")
        else:
            self.lines.append(f"{name} {_number(value)}")


def platform_key_set(label: str) -> str:
    """The keys of a scheduler requirement label, values dropped:
    ``"OSFamily=linux,cpu=2,mem=1 GiB"`` -> ``"OSFamily,cpu,mem"``. Bounded by
    the configured property names, so safe as a metric label."""
    if not label:
        return ""
    return ",".join(part.partition("=")[0] for part in label.split(","))


def render_metrics(snapshot: ProcessSnapshot, rpc: RpcStatistics | None = None) -> str:
    """The ``/metrics`` body for ``snapshot`` and the RPC recorder's statistics."""
    w = _Writer()
    w.family("lre_up", "gauge", "1 while lre serves.", [({}, 1)])
    w.family(
        "lre_healthy", "gauge", "1 when /status answers 200.", [({}, 1 if snapshot.healthy else 0)]
    )
    w.family("lre_uptime_seconds", "gauge", "Seconds since lre started.", [({}, snapshot.uptime_s)])

    w.family(
        "lre_operations",
        "gauge",
        "Live operations by stage.",
        [({"stage": stage}, n) for stage, n in sorted(snapshot.by_stage.items())],
    )
    by_keys: dict[str, int] = defaultdict(int)
    for label, n in snapshot.queued_by_platform.items():
        by_keys[platform_key_set(label)] += n
    w.family(
        "lre_queued_operations",
        "gauge",
        "Queued operations by the keys of their platform requirements.",
        [({"platform": keys}, n) for keys, n in sorted(by_keys.items())],
    )
    running: dict[str, int] = {row.name: 0 for row in snapshot.workers}
    rss: dict[str, int] = {row.name: 0 for row in snapshot.workers}
    for action in snapshot.inflight:
        running[action.worker] = running.get(action.worker, 0) + 1
        rss[action.worker] = rss.get(action.worker, 0) + (action.rss_bytes or 0)
    w.family(
        "lre_running_actions",
        "gauge",
        "Actions running now, per worker.",
        [({"worker": name}, n) for name, n in sorted(running.items())],
    )
    w.family(
        "lre_action_rss_bytes",
        "gauge",
        "Sampled RSS of all running actions' process trees, per worker.",
        [({"worker": name}, n) for name, n in sorted(rss.items())],
    )

    w.family(
        "lre_client_cache_hits_total",
        "counter",
        "Action-cache hits as the client sees them, by the call that found them "
        "(get_action_result, execute); kept across restarts, reset by `lre stats --zero`.",
        [
            ({"via": "get_action_result"}, snapshot.client_get_action_result_hits),
            ({"via": "execute"}, snapshot.client_execute_hits),
        ],
    )
    w.family(
        "lre_client_cache_misses_total",
        "counter",
        "Actions lre ran (no cached result); kept across restarts like the hits.",
        [({}, snapshot.client_misses)],
    )
    w.family(
        "lre_completed_total",
        "counter",
        "Finished operations by outcome.",
        [({"outcome": outcome}, n) for outcome, n in sorted(snapshot.completions.items())],
    )
    for name, help_text, value in (
        ("lre_submitted_total", "Operations submitted (Execute calls).", snapshot.submitted),
        ("lre_cache_hits_total", "Executions answered from the action cache.", snapshot.cache_hits),
        (
            "lre_cache_misses_total",
            "Executions that missed the action cache and had to run.",
            snapshot.cache_misses,
        ),
        ("lre_dedup_hits_total", "Executions that joined a running twin.", snapshot.dedup_hits),
        ("lre_retries_total", "Infrastructure retries.", snapshot.retries),
        (
            "lre_backpressure_requeues_total",
            "Leases a worker's precondition declined.",
            snapshot.backpressure_requeues,
        ),
        (
            "lre_ladder_kills_total",
            "Actions killed while memory was short (requeued up the ladder or failed).",
            snapshot.ladder_kills,
        ),
        (
            "lre_memory_frozen_total",
            "Actions frozen (SIGSTOP) while memory was short.",
            sum(r.frozen for r in snapshot.memory_control),
        ),
        (
            "lre_memory_thawed_total",
            "Frozen actions woken again.",
            sum(r.thawed for r in snapshot.memory_control),
        ),
        (
            "lre_lease_cancellations_total",
            "Running actions cancelled.",
            snapshot.lease_cancellations,
        ),
    ):
        w.family(name, "counter", help_text, [({}, value)])
    w.family(
        "lre_events_total",
        "counter",
        "Events shown in the recent-events pane, by kind.",
        [({"kind": kind}, n) for kind, n in sorted(snapshot.event_totals.items())],
    )

    workers = sorted(snapshot.workers, key=lambda row: row.name)
    worker_families: tuple[tuple[str, str, Callable[[WorkerRow], float]], ...] = (
        (
            "lre_cpu_reserved_cpus",
            "CPUs reserved by running actions, per worker.",
            lambda r: r.millicpus_reserved / 1000,
        ),
        (
            "lre_cpu_capacity_cpus",
            "CPUs a worker offers (cores x overcommit).",
            lambda r: r.millicpus_capacity / 1000,
        ),
        (
            "lre_memory_reserved_bytes",
            "Memory reserved by running actions, per worker.",
            lambda r: r.memory_reserved_bytes,
        ),
        ("lre_memory_capacity_bytes", "Memory a worker offers.", lambda r: r.memory_capacity_bytes),
    )
    for name, help_text, of_worker in worker_families:
        w.family(name, "gauge", help_text, [({"worker": r.name}, of_worker(r)) for r in workers])
    w.family(
        "lre_memory_budget_bytes",
        "gauge",
        "Global memory budget of all running actions (absent when unbounded).",
        [] if snapshot.memory_budget_bytes is None else [({}, snapshot.memory_budget_bytes)],
    )
    w.family(
        "lre_worker_draining",
        "gauge",
        "1 while a worker takes no new actions.",
        [({"worker": r.name}, 1 if r.draining else 0) for r in workers],
    )

    stores = sorted(snapshot.stores, key=lambda row: row.name)
    store_families: tuple[tuple[str, str, str, Callable[[StoreRow], float]], ...] = (
        ("lre_cas_bytes", "gauge", "Bytes held by a bounded store.", lambda s: s.used_bytes),
        (
            "lre_cas_capacity_bytes",
            "gauge",
            "Byte limit of a bounded store (0 = unbounded).",
            lambda s: s.max_bytes,
        ),
        ("lre_cas_blobs", "gauge", "Blobs held by a bounded store.", lambda s: s.blob_count),
        (
            "lre_cas_evictions_total",
            "counter",
            "Blobs evicted to stay under the limit.",
            lambda s: s.evicted_blobs,
        ),
        (
            "lre_cas_evicted_bytes_total",
            "counter",
            "Bytes evicted to stay under the limit.",
            lambda s: s.evicted_bytes,
        ),
    )
    for name, kind, help_text, of_store in store_families:
        w.family(name, kind, help_text, [({"store": s.name}, of_store(s)) for s in stores])

    jobserver = snapshot.jobserver
    w.family(
        "lre_jobserver_tokens_in_use",
        "gauge",
        "Jobserver tokens held by actions' child processes now.",
        [] if jobserver is None else [({}, jobserver.in_use)],
    )
    w.family(
        "lre_jobserver_tokens",
        "gauge",
        "Jobserver tokens in all live pools.",
        [] if jobserver is None else [({}, jobserver.total)],
    )

    _upstream_families(w, snapshot)
    if rpc is not None:
        _rpc_families(w, rpc)
    if snapshot.phases:
        w.lines += phase_lines(snapshot.phases)
    w.lines += process_lines()
    return "\n".join(w.lines) + "\n"


def _upstream_families(w: _Writer, snapshot: ProcessSnapshot) -> None:
    """Per upstream connection (``upstream``: a name from the config): its
    state and calls, and its counters (``counter``: a fixed set of names,
    gRPC code names among them; see ``UpstreamRow``)."""
    rows = sorted(snapshot.upstreams, key=lambda row: row.name)
    w.family(
        "lre_upstream_state",
        "gauge",
        "1 for the upstream's current state (unknown, up or down), 0 for the others.",
        [
            ({"upstream": r.name, "state": state}, 1 if r.state == state else 0)
            for r in rows
            for state in ("unknown", "up", "down")
        ],
    )
    w.family(
        "lre_upstream_calls_total",
        "counter",
        "Calls made to the upstream.",
        [({"upstream": r.name}, r.calls) for r in rows],
    )
    w.family(
        "lre_upstream_failed_calls_total",
        "counter",
        "Calls that could not reach the upstream.",
        [({"upstream": r.name}, r.failed_calls) for r in rows],
    )
    w.family(
        "lre_upstream_events_total",
        "counter",
        "Read-through hits, misses and bytes; forwarded actions by reason; local "
        "fallbacks and refusals by gRPC code.",
        [
            ({"upstream": r.name, "counter": name}, n)
            for r in rows
            for name, n in sorted(r.counters.items())
            if name != "forwarded_inflight"
        ],
    )
    w.family(
        "lre_upstream_forwarded_inflight",
        "gauge",
        "Forwarded actions running upstream now.",
        [
            ({"upstream": r.name}, r.counters["forwarded_inflight"])
            for r in rows
            if "forwarded_inflight" in r.counters
        ],
    )


def _rpc_families(w: _Writer, rpc: RpcStatistics) -> None:
    w.family(
        "lre_rpc_requests_total",
        "counter",
        "Finished gRPC calls by method and status code.",
        [
            ({"method": m.method, "code": code}, n)
            for m in rpc.methods
            for code, n in sorted(m.codes.items())
        ],
    )
    name = "lre_rpc_duration_seconds"
    w.lines.append(f"# HELP {name} gRPC call latency by method (streams: whole call).")
    w.lines.append(f"# TYPE {name} histogram")
    for m in rpc.methods:
        cumulative = 0
        for bound, count in zip(rpc.buckets, m.bucket_counts, strict=True):
            cumulative += count
            w.sample(f"{name}_bucket", {"method": m.method, "le": repr(float(bound))}, cumulative)
        w.sample(f"{name}_bucket", {"method": m.method, "le": "+Inf"}, m.count)
        w.sample(f"{name}_count", {"method": m.method}, m.count)
        w.sample(f"{name}_sum", {"method": m.method}, m.sum_seconds)
