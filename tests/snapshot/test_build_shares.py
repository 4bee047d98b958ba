"""What ``lre builds`` records of the share each build had (lre/snapshot/_builds.py)."""

from __future__ import annotations

import pytest

from lre.snapshot import ActionRecord, Source, WaitReason, summarize_builds


def ran(invocation: str, offset: float, seconds: float, *waited: str) -> ActionRecord:
    start = 1000.0 + offset  # a stamp of 0 means "not stamped"
    return ActionRecord(
        at=start + seconds,
        source=Source.EXECUTED,
        invocation=invocation,
        submitted_at=start,
        waited_for=tuple(waited),
        stamps={"execution_start": start, "execution_completed": start + seconds},
    )


def test_a_build_alone_had_the_whole_machine() -> None:
    (build,) = summarize_builds([ran("a", 0, 1), ran("a", 1, 1)])
    assert (build.share, build.share_waits) == (1.0, 0)


def test_two_builds_at_once_each_had_their_part() -> None:
    records = [ran("a", t, 1) for t in range(10)]
    # b ran three one-second actions while a ran, one of them after waiting for its share
    records += [ran("b", 4, 1), ran("b", 5, 1, WaitReason.BUILD_SHARE), ran("b", 6, 1)]
    by_id = {b.invocation: b for b in summarize_builds(records)}
    # b's span is 4..7: a's actions that ended at 4, 5, 6 and 7 ran meanwhile
    assert by_id["b"].share == pytest.approx(3 / 7)
    assert by_id["b"].share_waits == 1
    assert by_id["a"].share == pytest.approx(10 / 13)
    assert by_id["a"].to_json()["share"] == pytest.approx(0.769)
