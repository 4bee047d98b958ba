"""``lre_build_info``, ``process_*`` and the per-phase histograms on /metrics."""

from __future__ import annotations

import os
import time
from dataclasses import replace

import psutil
from prometheus_client.parser import text_string_to_metric_families

import lre
from lre.app._history import HistoryRecorder
from lre.app._metrics import render_metrics
from lre.snapshot import PHASE_BUCKETS_S, Phase
from tests._support.history import action
from tests.tui._sample import sample_snapshot


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def test_build_info_and_process_figures(tmp_path: object) -> None:
    samples = _samples(render_metrics(sample_snapshot()))
    ((labels, one),) = samples["lre_build_info"]
    assert one == 1 and labels["version"] == lre.__version__
    ((_, rss),) = samples["process_resident_memory_bytes"]
    assert 0.5 * psutil.Process().memory_info().rss < rss < 2 * psutil.Process().memory_info().rss
    ((_, fds),) = samples["process_open_fds"]
    assert 3 <= fds <= len(os.listdir("/proc/self/fd")) + 10
    ((_, started),) = samples["process_start_time_seconds"]
    assert started <= time.time()
    ((_, cpu),) = samples["process_cpu_seconds_total"]
    assert cpu > 0


def test_phase_histograms_have_bounded_series_however_many_actions(tmp_path: object) -> None:
    recorder = HistoryRecorder(str(tmp_path), max_bytes=1 << 20)
    few = replace(sample_snapshot(), phases=recorder.phase_histograms())
    for n in range(2000):
        recorder.record(action(n, 1_800_000_000.0 + n, slot_seconds=0.001 * (n % 50)))
    many = replace(sample_snapshot(), phases=recorder.phase_histograms())
    samples = _samples(render_metrics(many))
    buckets = samples["lre_action_phase_seconds_bucket"]
    assert {labels["phase"] for labels, _ in buckets} == {p.value for p in Phase}
    assert len(buckets) == len(Phase) * (len(PHASE_BUCKETS_S) + 1)
    counts = {labels["phase"]: v for labels, v in samples["lre_action_phase_seconds_count"]}
    assert counts == {p.value: 2000 for p in Phase}
    running = {labels["le"]: v for labels, v in buckets if labels["phase"] == "running"}
    assert running["0.001"] < running["0.05"] == 2000  # running took 0..49 ms
    series = {(name, tuple(sorted(labels.items()))) for name, rows in samples.items()
              for labels, _ in rows if name.startswith("lre_action_phase")}  # fmt: skip
    few_series = {
        (name, tuple(sorted(labels.items())))
        for name, rows in _samples(render_metrics(few)).items()
        for labels, _ in rows
        if name.startswith("lre_action_phase")
    }
    assert series == few_series  # the same series after 2000 actions as after none
