"""The one phase model: names, order and boundaries."""

from __future__ import annotations

import itertools

from lre.snapshot import BOUNDARIES, PHASES, Phase
from lre.snapshot._phases import phase_spans


def test_phases_are_named_once_in_order_and_chain_end_to_start() -> None:
    assert [p.value for p in PHASES] == ["queued", "staging", "running", "storing"]
    # each phase starts where the one before ended: no time falls between them
    for before, after in itertools.pairwise(PHASES):
        assert BOUNDARIES[before][1] == BOUNDARIES[after][0]


def test_spans_from_stamps_skip_missing_phases_and_never_go_negative() -> None:
    stamps = {
        "queued": 10.0,
        "worker_start": 10.5,
        "execution_start": 11.0,
        "execution_completed": 13.0,
        "worker_completed": 12.9,  # a clock step backwards
    }
    spans = phase_spans(stamps)
    assert [s.phase for s in spans] == list(PHASES)
    assert [round(s.seconds, 3) for s in spans] == [0.5, 0.5, 2.0, 0.0]
    failed_staging = phase_spans({"queued": 1.0, "worker_start": 2.0})
    assert [s.phase for s in failed_staging] == [Phase.QUEUED]
