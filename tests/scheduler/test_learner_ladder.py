"""MemoryLadder and MemoryAdmission (pure logic, psutil for the live reading)."""

from __future__ import annotations

import pytest

from lre.config import ResourceSpec
from lre.errors import ResourceExhausted, StatusCode
from lre.scheduler._admission import MemoryAdmission
from lre.scheduler._ladder import LadderStep, MemoryLadder, format_bytes

MiB = 1 << 20
GiB = 1 << 30


def ladder(**kw: int) -> MemoryLadder:
    return MemoryLadder(
        (GiB, 2 * GiB, 4 * GiB, 8 * GiB),
        max_steps=kw.get("max_steps", 5),
        kill_factor=1.2,
        whole_worker_bytes=12 * GiB,
    )


def test_format_bytes() -> None:
    assert format_bytes(512 * MiB) == "512 MiB"
    assert format_bytes(3 * GiB // 2) == "1.5 GiB"
    assert format_bytes(100) == "100 B"


def test_climbs_from_cold_to_the_first_larger_rung() -> None:
    lad = ladder()
    start = lad.start(256 * MiB)
    assert start == LadderStep(0, 256 * MiB)
    assert lad.kill_line(start) == int(256 * MiB * 1.2)
    nxt = lad.after_kill(start, kills=1)
    assert nxt == LadderStep(1, GiB)
    # an action growing to 800 MiB is under 1 GiB x 1.2: it succeeds at step 1
    assert 800 * MiB < lad.kill_line(nxt)


def test_rungs_below_the_reservation_are_skipped() -> None:
    lad = ladder()
    start = lad.start(3 * GiB)
    assert lad.after_kill(start, 1) == LadderStep(3, 4 * GiB)


def test_past_the_top_is_the_whole_worker_then_failure() -> None:
    lad = ladder(max_steps=10)
    step = lad.start(512 * MiB)
    tried = [step]
    kills = 0
    while True:
        kills += 1
        nxt = lad.after_kill(step, kills)
        if nxt is None:
            break
        tried.append(nxt)
        step = nxt
    assert [s.index for s in tried] == [0, 1, 2, 3, 4, 5]
    assert tried[-1].whole_worker and tried[-1].memory_bytes == 12 * GiB
    err = lad.exhausted(13 * GiB, tried)
    assert isinstance(err, ResourceExhausted) and err.code == StatusCode.RESOURCE_EXHAUSTED
    assert "peak RSS 13 GiB" in err.message
    assert "512 MiB, 1 GiB, 2 GiB, 4 GiB, 8 GiB, whole worker (12 GiB)" in err.message
    assert "6 time(s)" in err.message


def test_max_steps_ends_the_climb() -> None:
    lad = ladder(max_steps=2)
    s0 = lad.start(100 * MiB)
    s1 = lad.after_kill(s0, 1)
    assert s1 is not None
    assert lad.after_kill(s1, 2) is None


def test_learned_step_starts_higher_but_never_below_initial() -> None:
    lad = ladder()
    assert lad.start(256 * MiB, learned_step=2) == LadderStep(2, 2 * GiB)
    assert lad.start(3 * GiB, learned_step=1) == LadderStep(1, 3 * GiB)
    assert lad.start(1, learned_step=99).whole_worker


def test_from_spec_and_validation() -> None:
    spec = ResourceSpec()
    lad = MemoryLadder.from_spec(spec, whole_worker_bytes=6 * GiB)
    assert lad.rungs == (GiB, 2 * GiB, 4 * GiB, 8 * GiB) and lad.max_steps == 5
    with pytest.raises(ValueError, match="increasing"):
        MemoryLadder((2, 1), max_steps=1, kill_factor=1.2, whole_worker_bytes=1)
    with pytest.raises(ValueError, match="max_steps"):
        MemoryLadder((1,), max_steps=0, kill_factor=1.2, whole_worker_bytes=1)
    with pytest.raises(ValueError, match="kill_factor"):
        MemoryLadder((1,), max_steps=1, kill_factor=0.5, whole_worker_bytes=1)


# ---------------------------------------------------------------- admission


def test_budget_admission() -> None:
    adm = MemoryAdmission(2 * GiB, live_memory_veto=False)
    for _ in range(6):
        assert adm.fits(300 * MiB)
        adm.reserve(300 * MiB)
    assert not adm.fits(300 * MiB)  # 1800 MiB reserved, 248 MiB left
    assert adm.check(300 * MiB).reason.startswith("memory budget")
    assert adm.left_bytes == 2 * GiB - 1800 * MiB
    adm.release(300 * MiB)
    assert adm.fits(300 * MiB)
    assert adm.statistics().vetoed_budget == 2  # each refusal counts


def test_oversized_action_runs_alone() -> None:
    adm = MemoryAdmission(2 * GiB, live_memory_veto=False)
    assert adm.fits(5 * GiB)  # nothing running: admitted
    adm.reserve(5 * GiB)
    assert not adm.fits(1)
    adm.release(5 * GiB)
    with pytest.raises(ValueError, match="without a matching reserve"):
        adm.release(1)


def test_live_memory_veto() -> None:
    available = [10 * GiB]
    adm = MemoryAdmission(0, available_bytes=lambda: available[0], live_cache_s=0)
    assert adm.left_bytes is None  # no budget
    adm.reserve(GiB)
    assert adm.fits(GiB)
    available[0] = 512 * MiB
    decision = adm.check(GiB)
    assert not decision.admit and decision.reason.startswith("host memory")
    assert adm.statistics().vetoed_live == 1


def test_available_memory_is_read_from_psutil() -> None:
    adm = MemoryAdmission(4 * GiB)
    assert adm.budget_bytes == 4 * GiB
    assert adm.available_bytes() > 0
