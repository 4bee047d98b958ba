"""``/metrics`` families about the lre process itself and the phases of actions.

- ``lre_build_info{version, python}`` (always 1): which lre answers;
- ``process_*`` as Prometheus' own clients name them: CPU seconds, resident
  and virtual memory, open and maximum file descriptors, start time;
- ``lre_action_phase_seconds{phase}``: a histogram per phase of the one phase
  model (``lre.snapshot.Phase``: queued, staging, running, storing) over every
  action the history recorded since start. Buckets are the fixed
  ``lre.snapshot.PHASE_BUCKETS_S``; the only label is the phase, so the series
  are bounded however many actions run.

A process figure that cannot be read (``psutil`` raising) is left out,
never an error of ``/metrics``.
"""

from __future__ import annotations

import platform
import resource

import psutil

import lre
from lre.snapshot import PHASE_BUCKETS_S, PhaseHistogram

__all__ = ["phase_lines", "process_lines"]


def _family(name: str, kind: str, help_text: str, value: float, labels: str = "") -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name}{labels} {value!r}"]


def process_lines() -> list[str]:
    """``lre_build_info`` and ``process_*`` of this process, in exposition lines."""
    version = lre.__version__.replace('"', "")
    python = platform.python_version()
    lines = [
        "# HELP lre_build_info Which lre answers (always 1).",
        "# TYPE lre_build_info gauge",
        f'lre_build_info{{version="{version}",python="{python}"}} 1',
    ]
    try:
        process = psutil.Process()
        with process.oneshot():
            times = process.cpu_times()
            memory = process.memory_info()
            fds = process.num_fds()
            started = process.create_time()
    except psutil.Error:
        return lines
    lines += _family(
        "process_cpu_seconds_total",
        "counter",
        "User and system CPU time of lre (its own threads, not its actions).",
        float(times.user + times.system),
    )
    lines += _family(
        "process_resident_memory_bytes", "gauge", "Resident memory of lre.", float(memory.rss)
    )
    lines += _family(
        "process_virtual_memory_bytes", "gauge", "Virtual memory of lre.", float(memory.vms)
    )
    lines += _family("process_open_fds", "gauge", "Open file descriptors of lre.", float(fds))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        lines += _family(
            "process_max_fds", "gauge", "The soft limit of open file descriptors.", float(soft)
        )
    lines += _family(
        "process_start_time_seconds",
        "gauge",
        "When lre started, in seconds since the epoch.",
        float(started),
    )
    return lines


def phase_lines(phases: tuple[PhaseHistogram, ...]) -> list[str]:
    """``lre_action_phase_seconds`` histograms, one per phase."""
    name = "lre_action_phase_seconds"
    lines = [
        f"# HELP {name} How long actions spent in each phase "
        "(queued, staging, running, storing), over every recorded action.",
        f"# TYPE {name} histogram",
    ]
    for histogram in phases:
        label = histogram.phase.value
        cumulative = 0
        for bound, count in zip(PHASE_BUCKETS_S, histogram.bucket_counts, strict=True):
            cumulative += count
            lines.append(f'{name}_bucket{{phase="{label}",le="{float(bound)!r}"}} {cumulative}')
        lines.append(f'{name}_bucket{{phase="{label}",le="+Inf"}} {histogram.count}')
        lines.append(f'{name}_count{{phase="{label}"}} {histogram.count}')
        lines.append(f'{name}_sum{{phase="{label}"}} {histogram.sum_seconds!r}')
    return lines
