"""The memory policy with injected readings (lre/worker/memory/_governor.py)."""

from __future__ import annotations

import pytest

from lre.worker.memory._governor import (
    GovernedAction,
    GovernorLimits,
    MemoryGovernor,
    MemoryReading,
)

MiB = 1 << 20
GiB = 1 << 30

PLENTY = MemoryReading(16 * GiB)
SHORT = MemoryReading(int(1.5 * GiB))  # under the 2 GiB headroom, over the floor
UNDER_FLOOR = MemoryReading(512 * MiB)


def governor(**kw: float) -> MemoryGovernor:
    values: dict[str, float] = {
        "headroom_bytes": 2 * GiB,
        "floor_bytes": 1 * GiB,
        "ceiling_bytes": 10 * GiB,
        "max_frozen_s": 60.0,
        "thaw_interval_s": 1.0,
    }
    values.update(kw)
    return MemoryGovernor(GovernorLimits(**values))  # type: ignore[arg-type]


def action(
    name: str, order: int, rss_mib: int, reserved_mib: int = 100, frozen: float | None = None
) -> GovernedAction:
    return GovernedAction(name, order, rss_mib * MiB, reserved_mib * MiB, frozen)


def test_over_its_reservation_on_an_idle_machine_is_left_alone() -> None:
    gov = governor()
    actions = [action("a", 0, 700, reserved_mib=100), action("b", 1, 900, reserved_mib=50)]
    for now in range(5):
        decision = gov.decide(actions, PLENTY, float(now))
        assert not decision.short
        assert decision.kill == decision.freeze == ()


def test_memory_used_outside_lre_makes_memory_short_and_freezes_the_newest() -> None:
    gov = governor()
    gov.decide([action("a", 0, 10), action("b", 1, 10)], PLENTY, 0.0)
    # lre's actions hold 50 MiB; someone else took the rest of the machine
    decision = gov.decide([action("a", 0, 20), action("b", 1, 30)], SHORT, 1.0)
    assert decision.short and "MemAvailable" in decision.reason
    assert decision.freeze == ("b",)


def test_the_oldest_running_action_is_never_frozen() -> None:
    gov = governor()
    gov.decide([action("old", 0, 10), action("new", 1, 10)], PLENTY, 0.0)
    # the oldest is the furthest over its reservation, yet the newer one is frozen
    decision = gov.decide([action("old", 0, 900), action("new", 1, 200)], SHORT, 1.0)
    assert decision.freeze == ("new",)
    alone = governor()
    alone.decide([action("old", 0, 10)], PLENTY, 0.0)
    assert alone.decide([action("old", 0, 900)], SHORT, 1.0).freeze == ()


def test_every_growing_action_is_frozen_at_once_furthest_over_first() -> None:
    # One per pass let the others grow on for a sampling interval each: ten
    # actions at 200 MB/s overshot a 2 GiB budget by 300 MiB (bench (b)).
    gov = governor()
    actions = [action("a", 0, 10), action("b", 1, 150), action("c", 2, 400), action("d", 3, 120)]
    gov.decide([action(a.action_id, a.order, 1) for a in actions], PLENTY, 0.0)
    assert gov.decide(actions, SHORT, 1.0).freeze == ("c", "b", "d")


def test_only_the_actions_that_grew_are_frozen() -> None:
    gov = governor()
    first = [action("a", 0, 10), action("b", 1, 150), action("c", 2, 400), action("d", 3, 120)]
    gov.decide(first, PLENTY, 0.0)
    grown = [action("a", 0, 10), action("b", 1, 150), action("c", 2, 400), action("d", 3, 160)]
    assert gov.decide(grown, SHORT, 1.0).freeze == ("d",)


def test_nothing_more_is_frozen_while_nothing_grows() -> None:
    gov = governor()
    actions = [action("a", 0, 10), action("b", 1, 10)]
    gov.decide(actions, PLENTY, 0.0)
    decision = gov.decide(actions, SHORT, 1.0)  # a steady outside user: admission stops
    assert decision.short and decision.freeze == ()


def test_pressure_stall_information_counts() -> None:
    gov = governor(pressure_threshold=10.0)
    gov.decide([action("a", 0, 1), action("b", 1, 1)], PLENTY, 0.0)
    decision = gov.decide(
        [action("a", 0, 10), action("b", 1, 50)], MemoryReading(16 * GiB, 25.0), 1.0
    )
    assert decision.short and "PSI" in decision.reason
    assert decision.freeze == ("b",)
    off = governor(pressure_threshold=0.0)
    assert not off.decide([action("a", 0, 10)], MemoryReading(16 * GiB, 90.0), 0.0).short


def test_the_budget_counts_one_more_interval_of_growth() -> None:
    # 700 MiB now, 300 MiB more since the last pass: the next pass would find
    # 1000 MiB, past 90% of 1 GiB, so memory is short already.
    gov = governor(budget_bytes=1 * GiB, budget_share=0.9)
    assert not gov.decide([action("a", 0, 200), action("b", 1, 200)], PLENTY, 0.0).short
    decision = gov.decide([action("a", 0, 350), action("b", 1, 350)], PLENTY, 0.25)
    assert decision.short and "budget" in decision.reason
    assert decision.freeze == ("b",)
    # without growth the same 700 MiB is not short
    steady = governor(budget_bytes=1 * GiB, budget_share=0.9)
    steady.decide([action("a", 0, 350), action("b", 1, 350)], PLENTY, 0.0)
    assert not steady.decide([action("a", 0, 350), action("b", 1, 350)], PLENTY, 0.25).short


def test_summed_rss_near_the_budget_counts() -> None:
    gov = governor(budget_bytes=1 * GiB, budget_share=0.9)
    decision = gov.decide([action("a", 0, 500), action("b", 1, 450)], PLENTY, 0.0)
    assert decision.short and "budget" in decision.reason
    assert decision.freeze == ("b",)


def test_under_the_hard_floor_the_newest_frozen_action_is_killed() -> None:
    gov = governor()
    actions = [
        action("a", 0, 10),
        action("b", 1, 300, frozen=0.5),
        action("c", 2, 200, frozen=0.8),
        action("d", 3, 50),
    ]
    decision = gov.decide(actions, UNDER_FLOOR, 1.0)
    assert decision.kill == (("c", decision.kill[0][1], False),)
    assert "hard floor" in decision.kill[0][1]


def test_under_the_floor_with_nothing_frozen_the_newest_is_killed_not_the_oldest() -> None:
    gov = governor()
    decision = gov.decide([action("a", 0, 900), action("b", 1, 10)], UNDER_FLOOR, 0.0)
    assert [k[0] for k in decision.kill] == ["b"]


def test_no_second_floor_kill_before_the_first_victim_ended() -> None:
    gov = governor()
    actions = [action("a", 0, 900), action("b", 1, 10, frozen=0.0)]
    assert gov.decide(actions, UNDER_FLOOR, 1.0, settling=True).kill == ()


def test_frozen_too_long_is_killed_and_retried() -> None:
    gov = governor(max_frozen_s=30.0)
    actions = [action("a", 0, 10), action("b", 1, 300, frozen=0.0)]
    assert gov.decide(actions, SHORT, 29.0).kill == ()
    (kill,) = gov.decide(actions, SHORT, 31.0).kill
    assert kill[0] == "b" and not kill[2] and "frozen for more than 30 s" in kill[1]


def test_thawed_one_at_a_time_oldest_frozen_first_once_memory_is_back() -> None:
    gov = governor(thaw_interval_s=1.0)
    actions = [action("a", 0, 10), action("b", 1, 300, frozen=0.0), action("c", 2, 300, frozen=0.1)]
    assert gov.decide(actions, SHORT, 5.0).thaw == ()  # still short: frozen stay frozen
    assert gov.decide(actions, PLENTY, 6.0).thaw == ("b",)
    thawed = [action("a", 0, 10), action("b", 1, 300), action("c", 2, 300, frozen=0.1)]
    assert gov.decide(thawed, PLENTY, 6.5).thaw == ()  # one at a time
    assert gov.decide(thawed, PLENTY, 7.1).thaw == ("c",)


def test_no_thaw_without_room_above_the_headroom() -> None:
    gov = governor()
    actions = [action("a", 0, 10), action("b", 1, 300, reserved_mib=500, frozen=0.0)]
    # 100 MiB above the headroom, b still has 200 MiB of its reservation to grow into
    assert gov.decide(actions, MemoryReading(2 * GiB + 100 * MiB), 5.0).thaw == ()
    assert gov.decide(actions, MemoryReading(2 * GiB + 300 * MiB), 6.0).thaw == ("b",)


def test_an_oldest_action_left_frozen_is_thawed_at_once() -> None:
    gov = governor()
    decision = gov.decide([action("b", 1, 300, frozen=0.0), action("c", 2, 10)], SHORT, 1.0)
    assert decision.thaw == ("b",)


def test_the_hard_ceiling_kills_at_any_time_and_is_final() -> None:
    gov = governor(ceiling_bytes=1 * GiB)
    decision = gov.decide([action("a", 0, 1100), action("b", 1, 10)], PLENTY, 0.0)
    assert decision.kill == (("a", "over the hard ceiling", True),)


def test_a_floor_above_the_headroom_is_refused() -> None:
    with pytest.raises(ValueError, match="floor"):
        governor(floor_bytes=3 * GiB)
