"""What a finished run teaches the learner (lre/scheduler/_sizing.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from lre.proto import re_pb2
from lre.scheduler._model import Completed, MemoryExceeded, Usage
from lre.scheduler._sizing import MIN_CPU_SAMPLE_WALL_S, record_usage


class RecordingAdvisor:
    def __init__(self) -> None:
        self.samples: list[tuple[str, int, int, int]] = []

    def record(self, key: str, peak: int, average: int, step: int) -> None:
        self.samples.append((key, peak, average, step))


def run(wall: float, cpu: float) -> tuple[str, int, int, int]:
    advisor = RecordingAdvisor()
    lease = SimpleNamespace(kind_key="kind", ladder_step=1)
    usage = Usage(peak_rss_bytes=4096, cpu_seconds=cpu, wall_seconds=wall)
    record_usage(
        cast(Any, advisor), cast(Any, lease), Completed(re_pb2.ActionResult(), usage=usage)
    )
    (sample,) = advisor.samples
    return sample


def test_long_runs_teach_cpu_and_memory() -> None:
    assert run(wall=2.0, cpu=3.0) == ("kind", 4096, 1500, 0)


def test_short_runs_teach_memory_only() -> None:
    # 0.2 s of wall: CPU / wall is start-up and tick rounding, not a figure to reserve by
    assert run(wall=0.2, cpu=0.23) == ("kind", 4096, 0, 0)
    assert MIN_CPU_SAMPLE_WALL_S == 1.0


def test_a_kill_sends_the_next_run_one_step_up_and_a_run_that_ends_brings_it_down() -> None:
    advisor = RecordingAdvisor()
    lease = SimpleNamespace(kind_key="kind", ladder_step=1)
    usage = Usage(peak_rss_bytes=4096, cpu_seconds=1.0, wall_seconds=2.0)
    record_usage(cast(Any, advisor), cast(Any, lease), MemoryExceeded(8192, usage=usage))
    record_usage(
        cast(Any, advisor), cast(Any, lease), Completed(re_pb2.ActionResult(), usage=usage)
    )
    assert [sample[3] for sample in advisor.samples] == [2, 0]
    assert advisor.samples[0][1] == 8192
