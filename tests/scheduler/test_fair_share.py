"""Fair shares between builds (lre/scheduler/_fair_share.py, _queue.py).

Real scheduler, fake worker, Trio's autojump clock: every wait is instant and
the order in which leases come is the whole assertion (no timing).
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from lre.config import FairShareSpec
from lre.scheduler import Lease, RecordBuilder, RequestInfo, Stage
from lre.scheduler._fair_share import BuildShares
from lre.snapshot import WaitReason
from tests._support.scheduler import (
    FakeWorker,
    Harness,
    execute_request,
    start_harness,
    worker_info,
)


class Builds:
    """Submits actions for named builds and says which build a lease is of."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.build_of: dict[str, str] = {}

    async def submit(
        self,
        build: str,
        count: int = 1,
        *,
        platform: dict[str, str] | None = None,
        info: RequestInfo | None = None,
    ) -> list[str]:
        names = []
        for _ in range(count):
            digest = await self.harness.builder.action(platform=platform)
            op = self.harness.scheduler.submit(
                execute_request(digest),
                request_info=info or RequestInfo(tool_invocation_id=build),
            )
            await self.harness.wait_stage(op.name, Stage.QUEUED)
            self.build_of[op.name] = build
            names.append(op.name)
        return names

    def of(self, lease: Lease) -> str:
        return self.build_of[lease.operation_name]


class SlotTime:
    """Seconds of a slot each build held after a moment, from when its leases
    started and ended (the test's clock)."""

    def __init__(self, builds: Builds) -> None:
        self.builds = builds
        self.spans: dict[str, list[float]] = {}  # lease id -> [start, end]
        self.build_of: dict[str, str] = {}

    def started(self, lease: Lease) -> None:
        self.spans[lease.lease_id] = [trio.current_time(), -1.0]
        self.build_of[lease.lease_id] = self.builds.of(lease)

    def ended(self, lease: Lease) -> None:
        if lease.lease_id in self.spans:
            self.spans[lease.lease_id][1] = trio.current_time()

    def since(self, moment: float) -> dict[str, float]:
        now = trio.current_time()
        held: dict[str, float] = {"A": 0.0, "B": 0.0}
        for lease_id, (start, end) in self.spans.items():
            held[self.build_of[lease_id]] = held.get(self.build_of[lease_id], 0.0) + max(
                0.0, (now if end < 0 else end) - max(start, moment)
            )
        return held


async def run_oldest_first(
    worker: FakeWorker,
    builds: Builds,
    held: list[Lease],
    n: int,
    every: float = 1.0,
    slots: SlotTime | None = None,
) -> str:
    """``n`` times: let ``every`` seconds pass, then complete the oldest held
    lease; the builds of the leases that started in its place, in order."""
    started = []
    for _ in range(n):
        await trio.sleep(every)
        done = held.pop(0)
        worker.complete(done)
        lease = await worker.next_lease()
        held.append(lease)
        started.append(builds.of(lease))
        if slots is not None:
            slots.ended(done)
            slots.started(lease)
    return "".join(started)


async def start(nursery: trio.Nursery, **spec: object) -> tuple[Harness, Builds]:
    harness = await start_harness(nursery, fair_share=FairShareSpec(**spec))  # type: ignore[arg-type]
    return harness, Builds(harness)


async def test_a_second_build_starts_at_the_next_free_slot_and_catches_up(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    harness, builds = await start(nursery)
    worker = await harness.add_worker(worker_info(cpus=2))
    await builds.submit("A", 12)
    held = [await worker.next_lease(), await worker.next_lease()]
    assert worker.no_lease_pending()
    await builds.submit("B", 4)
    assert worker.no_lease_pending()  # running actions are never preempted
    assert not any(lease.cancelled for lease in held)
    order = await run_oldest_first(worker, builds, held, 10)
    # A held both slots for the second B waited: the slots that free next go
    # to B until it has had as much as A since it came (three in a row), then
    # the builds take turns until B's four ran, then A has it all.
    assert order[:3] == "BBB", order
    assert order.count("B") == 4 and order.endswith("AAAA"), order


async def test_without_fair_share_a_second_build_waits_behind_the_first(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    harness, builds = await start(nursery, enabled=False)
    worker = await harness.add_worker(worker_info(cpus=2))
    await builds.submit("A", 6)
    held = [await worker.next_lease(), await worker.next_lease()]
    await builds.submit("B", 2)
    assert await run_oldest_first(worker, builds, held, 6) == "AAAABB"
    assert harness.scheduler.statistics().builds == ()


async def test_two_waiting_builds_get_equal_slot_time_from_the_second_ones_arrival(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    # Three slots, two builds: neither can have half at any instant, so the
    # slot time since B came is what comes out equal.
    harness, builds = await start(nursery)
    worker = await harness.add_worker(worker_info(cpus=3))
    slots = SlotTime(builds)
    await builds.submit("A", 40)
    held = [await worker.next_lease() for _ in range(3)]
    for lease in held:
        slots.started(lease)
    await builds.submit("B", 40)
    arrived = trio.current_time()
    await run_oldest_first(worker, builds, held, 3, slots=slots)
    held_since = slots.since(arrived)
    assert held_since["B"] < held_since["A"]  # B's first slot came a second late
    for steps in (3, 6, 12, 24):
        await run_oldest_first(worker, builds, held, steps, slots=slots)
        held_since = slots.since(arrived)
        # B has caught up; each action runs 3 s (three held, one ends a
        # second) and none is stopped, so one build may be ahead by about
        # the slot time of one more action.
        assert held_since["B"] >= held_since["A"] - 1, (steps, held_since)
        assert abs(held_since["A"] - held_since["B"]) <= 4, (steps, held_since)


async def test_weights_of_repositories_divide_the_slots(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    harness, builds = await start(nursery, weights={"big": 2.0})
    worker = await harness.add_worker(worker_info(cpus=3))
    slots = SlotTime(builds)
    big = RequestInfo(tool_invocation_id="A", repository="big")
    await builds.submit("A", 60, info=big)
    held = [await worker.next_lease() for _ in range(3)]
    for lease in held:
        slots.started(lease)
    await builds.submit("B", 60, info=RequestInfo(tool_invocation_id="B", repository="small"))
    arrived = trio.current_time()
    await run_oldest_first(worker, builds, held, 30, slots=slots)
    held_since = slots.since(arrived)
    assert held_since["A"] + held_since["B"] == pytest.approx(90.0, abs=0.1)
    # two thirds and one third of the 90 slot-seconds, give or take about one
    # 3-second action (none is stopped to even things out)
    assert held_since["A"] == pytest.approx(60, abs=4), held_since
    stats = {b.invocation: b for b in harness.scheduler.statistics().builds}
    assert stats["A"].fair_share == pytest.approx(2 / 3)
    assert stats["B"].fair_share == pytest.approx(1 / 3)
    assert stats["A"].running + stats["B"].running == 3
    assert stats["A"].used_share == pytest.approx(stats["A"].running / 3)


async def test_a_lone_build_gets_the_whole_machine(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    harness, builds = await start(nursery)
    worker = await harness.add_worker(worker_info(cpus=4))
    await builds.submit("A", 6)
    leases = [await worker.next_lease() for _ in range(4)]
    assert {builds.of(lease) for lease in leases} == {"A"}
    (row,) = harness.scheduler.statistics().builds
    assert (row.running, row.queued, row.fair_share, row.used_share) == (4, 2, 1.0, 1.0)


async def test_backfill_lets_another_builds_small_action_use_what_a_big_one_cannot(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    harness, builds = await start(nursery)
    worker = await harness.add_worker(worker_info(cpus=4))
    await builds.submit("B", 1)
    small = await worker.next_lease()  # B holds 1 of 4 CPUs
    await builds.submit("A", 1, platform={"cpu_count": "4"})
    await builds.submit("B", 2)
    # A is further below its share but its 4-CPU action cannot start while B
    # holds one CPU; B's small ones fill the three free CPUs meanwhile.
    backfilled = [await worker.next_lease(), await worker.next_lease()]
    assert [builds.of(lease) for lease in backfilled] == ["B", "B"]
    for lease in [small, *backfilled]:
        worker.complete(lease)
    big = await worker.next_lease()
    assert (builds.of(big), big.reservation.millicpus) == ("A", 4000)


async def test_a_build_waiting_for_its_share_says_so(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    records: list[RecordBuilder] = []
    harness = await start_harness(nursery, on_record=records.append)
    builds = Builds(harness)
    worker = await harness.add_worker(worker_info(cpus=1))

    async def reasons() -> dict[str, str]:
        await trio.sleep(1)  # the worker's lease call has tried again and waits
        queued = harness.scheduler.statistics().queued_next
        return {builds.build_of[q.operation]: q.waiting_for for q in queued}

    await builds.submit("A", 3)
    first = await worker.next_lease()
    await builds.submit("B", 2)
    worker.complete(first)
    b1 = await worker.next_lease()
    assert builds.of(b1) == "B"
    # B waited while A ran: B is first in line for the CPU it holds itself.
    assert await reasons() == {"A": WaitReason.BUILD_SHARE, "B": WaitReason.CPU}
    worker.complete(b1)
    a2 = await worker.next_lease()
    assert builds.of(a2) == "A"
    # B has had its second now; A, behind, is first in line for the CPU.
    assert await reasons() == {"A": WaitReason.CPU, "B": WaitReason.BUILD_SHARE}
    worker.complete(a2)
    b2 = await worker.next_lease()
    worker.complete(b2)
    worker.complete(await worker.next_lease())
    waited = {r.action: set(r.waited_for) for r in (builder() for builder in records)}
    assert WaitReason.BUILD_SHARE in waited[b2.action_key.action_digest.hash]
    assert WaitReason.BUILD_SHARE not in waited[first.action_key.action_digest.hash]


def test_what_makes_a_build() -> None:
    by_invocation = BuildShares(FairShareSpec())
    full = RequestInfo(
        tool_invocation_id="i", correlated_invocations_id="c", repository="r", peer="p"
    )
    assert by_invocation.key_of(full) == "invocation:i"
    assert by_invocation.key_of(RequestInfo(repository="r", peer="p")) == "repository:r"
    assert by_invocation.key_of(RequestInfo(peer="ipv4:127.0.0.1:5")) == (
        "connection:ipv4:127.0.0.1:5"
    )
    assert by_invocation.key_of(RequestInfo()) == "anonymous"
    correlated = BuildShares(FairShareSpec(build_key="correlated_invocations"))
    assert correlated.key_of(full) == "correlated:c"
    assert correlated.key_of(RequestInfo(tool_invocation_id="i", peer="p")) == "connection:p"
    by_repository = BuildShares(FairShareSpec(build_key="repository"))
    assert by_repository.key_of(full) == "repository:r"


def test_memory_can_be_the_dominant_share() -> None:
    from lre.scheduler import Reservation

    shares = BuildShares(FairShareSpec(weights={"light": 0.5}))
    shares.set_capacity(4000, 8 << 30)
    build = shares.build_of(RequestInfo(tool_invocation_id="x"))
    shares.started(build, Reservation(1000, 6 << 30))
    # a second build: shares are worked out and kept up to date from now on
    other = shares.build_of(RequestInfo(tool_invocation_id="y", repository="light"))
    assert build.share == pytest.approx(0.75)
    assert shares.used_fraction(build) == pytest.approx(0.75)
    shares.started(other, Reservation(1000, 1 << 30))
    assert other.share == pytest.approx(0.25 / 0.5)  # weights divide shares
    shares.finished(build, Reservation(1000, 6 << 30))
    assert (build.share, build.running) == (0.0, 0)
    shares.finished(other, Reservation(1000, 1 << 30))
    shares.sweep()
    assert shares.builds == {}


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_usage_adds_up_share_seconds_only_while_builds_compete() -> None:
    from lre.scheduler import Reservation

    clock = Clock()
    shares = BuildShares(FairShareSpec(), clock)
    shares.set_capacity(4000, 8 << 30)
    a = shares.build_of(RequestInfo(tool_invocation_id="a"))
    shares.started(a, Reservation(2000, 1 << 30))
    clock.now += 50  # alone: nothing is counted
    assert (shares.competing, a.usage, a.share) == (False, 0.0, 0.0)
    b = shares.build_of(RequestInfo(tool_invocation_id="b"))
    assert shares.competing and a.share == pytest.approx(0.5)
    clock.now += 2
    assert a.usage_at(clock.now) == pytest.approx(1.0)  # half the machine for 2 s
    shares.started(b, Reservation(1000, 1 << 30))
    clock.now += 4
    shares.finished(a, Reservation(2000, 1 << 30))
    assert a.usage == pytest.approx(3.0)
    assert b.usage_at(clock.now) == pytest.approx(1.0)
    shares.finished(b, Reservation(1000, 1 << 30))
    shares.sweep()
    assert not shares.competing


def test_a_build_brings_no_credit_from_a_time_it_had_nothing_to_run() -> None:
    from lre.scheduler import Reservation

    clock = Clock()
    shares = BuildShares(FairShareSpec(), clock)
    shares.set_capacity(2000, 8 << 30)
    a = shares.build_of(RequestInfo(tool_invocation_id="a"))
    b = shares.build_of(RequestInfo(tool_invocation_id="b"))
    a.queued = 10
    shares.started(a, Reservation(2000, 1 << 30))
    clock.now += 60  # A has the machine for a minute while B has nothing queued
    b.queued = 1
    shares.starts_waiting(b)
    # B starts level with A, not a minute behind it (which would give it the
    # whole machine for a minute).
    assert b.usage_at(clock.now) == pytest.approx(a.usage_at(clock.now)) == pytest.approx(60)
    # A build ahead of the others keeps its lead (no debt is forgiven).
    a_usage = a.usage_at(clock.now)
    b.usage = a_usage + 5
    b.since = clock.now
    shares.starts_waiting(b)
    assert b.usage_at(clock.now) == pytest.approx(a_usage + 5)
