"""/metrics text: parsed by prometheus_client's parser, bounded label sets."""

from __future__ import annotations

import trio
from prometheus_client.parser import text_string_to_metric_families

from lre.app._metrics import render_metrics
from lre.service import RpcMetrics
from lre.service._rpc_metrics import method_label
from lre.snapshot import ProcessSnapshot
from tests.tui._load import run, start_load, submit
from tests.tui._sample import sample_snapshot

ALLOWED_LABELS = {
    "worker",
    "stage",
    "platform",
    "outcome",
    "method",
    "code",
    "store",
    "kind",
    "le",
    "via",
}
# lre_build_info's two labels have one value each per process; phase is lre.snapshot.Phase
ALLOWED_LABELS |= {"version", "python", "phase"}


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """sample name -> samples as (labels, value), via the real Prometheus parser."""
    families: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            families.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return families


def series(text: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(
    families: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str
) -> float:
    matches = [v for lab, v in families[name] if lab == labels]
    assert len(matches) == 1, (name, labels, families.get(name))
    return matches[0]


def test_sample_snapshot_metrics_values() -> None:
    snapshot = sample_snapshot()
    rpc = RpcMetrics()
    rpc.record("Execution/Execute", "OK", 0.003)
    rpc.record("Execution/Execute", "OK", 7.0)
    rpc.record("ActionCache/GetActionResult", "NOT_FOUND", 0.0004)
    families = parse(render_metrics(snapshot, rpc.statistics()))

    assert value(families, "lre_operations", stage="QUEUED") == 42
    assert value(families, "lre_queued_operations", platform="OSFamily") == 42
    assert value(families, "lre_running_actions", worker="local") == 4
    assert value(families, "lre_running_actions", worker="big") == 1
    assert value(families, "lre_completed_total", outcome="nonzero_exit") == 7
    assert value(families, "lre_cache_hits_total") == 310
    assert value(families, "lre_cache_misses_total") == 950
    assert value(families, "lre_ladder_kills_total") == 4
    assert value(families, "lre_cpu_reserved_cpus", worker="local") == 5.0
    assert value(families, "lre_cpu_capacity_cpus", worker="big") == 8.0
    assert value(families, "lre_memory_budget_bytes") == 12 << 30
    assert value(families, "lre_cas_bytes", store="cas") == (3 << 30) + (200 << 20)
    assert value(families, "lre_cas_evictions_total", store="cas") == 5000
    assert value(families, "lre_jobserver_tokens_in_use") == 5
    assert value(families, "lre_healthy") == 1
    assert value(families, "lre_uptime_seconds") == 3600
    assert value(families, "lre_rpc_requests_total", method="Execution/Execute", code="OK") == 2
    hist = {
        lab["le"]: v
        for lab, v in families["lre_rpc_duration_seconds_bucket"]
        if lab.get("method") == "Execution/Execute" and "le" in lab
    }
    assert hist["0.0025"] == 0 and hist["0.005"] == 1 and hist["5.0"] == 1 and hist["10.0"] == 2
    assert hist["+Inf"] == 2
    assert (
        value(families, "lre_rpc_duration_seconds_count", method="Execution/Execute") == 2
    )  # _count
    # memory RSS aggregated per worker, never per action
    assert value(families, "lre_action_rss_bytes", worker="big") == 5 << 30


def test_unhealthy_snapshot_and_escaping() -> None:
    snapshot = ProcessSnapshot(
        taken_at=10.0,
        started_at=0.0,
        address="x",
        problems=("disk: full",),
        queued_by_platform={'pool="a\\b"\n=x': 2},
    )
    text = render_metrics(snapshot)
    families = parse(text)
    assert value(families, "lre_healthy") == 0
    # the key set of an odd label survives escaping and parsing
    assert value(families, "lre_queued_operations", platform="pool") == 2
    assert "lre_rpc_requests_total" not in text
    assert "lre_memory_budget_bytes" not in families  # unbounded: no sample


async def test_cardinality_bounded_after_500_actions(nursery: trio.Nursery) -> None:
    load = await start_load(nursery)
    await submit(load, 50)
    await run(load, 40, hold=3)
    rpc = RpcMetrics()
    small = render_metrics(load.assembler(), rpc.statistics())

    await submit(load, 450)
    await run(load, 400, hold=5)
    # 500 distinct RPC paths too: unknown ones must not become labels
    for n in range(500):
        rpc.record(method_label(f"/pkg.Service{n % 3}/Method"), "OK", 0.01)
    snapshot = load.assembler()
    big = render_metrics(snapshot, rpc.statistics())

    assert snapshot.submitted == 500
    assert snapshot.completed == 440
    assert snapshot.running == 8
    assert snapshot.queued == 52
    families = parse(big)
    assert value(families, "lre_submitted_total") == 500
    assert value(families, "lre_completed_total", outcome="nonzero_exit") == 6 + 58
    assert value(families, "lre_operations", stage="QUEUED") == 52
    assert value(families, "lre_running_actions", worker="local") == 8

    labels_seen = {k for _, labels in series(big) for k, _ in labels}
    assert labels_seen <= ALLOWED_LABELS, labels_seen - ALLOWED_LABELS
    values_seen = {v for _, labels in series(big) for _, v in labels}
    for ident in load.digests + load.operations:
        assert not any(ident in v for v in values_seen), ident
    assert not any(v.startswith(("Mnemonic", "//pkg")) for v in values_seen)
    platforms = {
        dict(labels)["platform"] for name, labels in series(big) if name == "lre_queued_operations"
    }
    assert platforms == {"OSFamily"}  # the queue is grouped by platform, not by sizes
    # ten times the actions, the same scheduler series (RPC methods were new)
    non_rpc = {s for s in series(big) if not s[0].startswith("lre_rpc")}
    assert non_rpc == {s for s in series(small) if not s[0].startswith("lre_rpc")}
    assert len(series(big)) < 150
    rpc_methods = {
        dict(labels)["method"] for name, labels in series(big) if name == "lre_rpc_requests_total"
    }
    assert rpc_methods == {"Service0/Method", "Service1/Method", "Service2/Method"}


def test_rpc_method_label_overflow() -> None:
    rpc = RpcMetrics(max_methods=4)
    for n in range(100):
        rpc.record(f"S/M{n}", "OK", 0.001)
    methods = {m.method: m.count for m in rpc.statistics().methods}
    assert methods == {"S/M0": 1, "S/M1": 1, "S/M2": 1, "S/M3": 1, "other": 96}
    assert method_label("/build.bazel.remote.execution.v2.Execution/Execute") == (
        "Execution/Execute"
    )
    assert method_label("garbage") == "unknown"
