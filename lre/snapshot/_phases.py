"""The one phase model of an action: names and boundaries.

Every place that talks about where an action's time went (the history, the
trace, the report, ``/metrics`` and the benchmarks) uses these names and
these boundaries. A boundary is named after the ``ExecutedActionMetadata``
timestamp lre's worker sets (``queued`` is ``queued_timestamp``, the moment
the Execute request was accepted):

=========  =======================  ==========================
phase      starts at                ends at
=========  =======================  ==========================
queued     ``queued``               ``worker_start``
staging    ``worker_start``         ``execution_start``
running    ``execution_start``      ``execution_completed``
storing    ``execution_completed``  ``worker_completed``
=========  =======================  ==========================

``queued`` therefore includes the cache lookup and the input check before
the action entered the run queue; ``staging`` is taking an action directory
and linking the inputs; ``storing`` is hashing and storing the outputs.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "BOUNDARIES",
    "PHASES",
    "PHASE_BUCKETS_S",
    "Phase",
    "PhaseHistogram",
    "PhaseSpan",
    "phase_spans",
]


class Phase(enum.StrEnum):
    """A phase of one attempt of an action (values never change once released)."""

    QUEUED = "queued"
    STAGING = "staging"
    RUNNING = "running"
    STORING = "storing"


#: The phases in the order they happen.
PHASES: tuple[Phase, ...] = tuple(Phase)

#: ``phase -> (start stamp, end stamp)`` by ``ExecutedActionMetadata`` name.
BOUNDARIES: Mapping[Phase, tuple[str, str]] = {
    Phase.QUEUED: ("queued", "worker_start"),
    Phase.STAGING: ("worker_start", "execution_start"),
    Phase.RUNNING: ("execution_start", "execution_completed"),
    Phase.STORING: ("execution_completed", "worker_completed"),
}


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    """One phase of one action, in wall-clock seconds (``time.time()``)."""

    phase: Phase
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def phase_spans(stamps: Mapping[str, float]) -> tuple[PhaseSpan, ...]:
    """The phases ``stamps`` (stamp name -> wall-clock seconds) bound, in order.

    A phase is left out when either boundary is missing or zero (an action
    that failed while staging has no ``running``); a phase whose end comes
    before its start (a clock step) is shown as empty, never negative.
    """
    spans = []
    for phase in PHASES:
        first, last = BOUNDARIES[phase]
        start = stamps.get(first, 0.0)
        end = stamps.get(last, 0.0)
        if start and end:
            spans.append(PhaseSpan(phase, start, max(start, end)))
    return tuple(spans)


#: Upper bounds (seconds) of the per-phase histogram buckets of ``/metrics``.
PHASE_BUCKETS_S: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.5,
    1.0,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    1800.0,
)


@dataclass(frozen=True, slots=True)
class PhaseHistogram:
    """How long one phase took over all recorded actions since start.
    ``bucket_counts[i]`` counts spans of at most ``PHASE_BUCKETS_S[i]`` and more
    than the bound before (not cumulative); longer ones are only in ``count``."""

    phase: Phase
    bucket_counts: tuple[int, ...]
    count: int
    sum_seconds: float
