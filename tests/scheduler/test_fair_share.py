"""Fair shares between builds (lre/scheduler/_fair_share.py, _queue.py).

Real scheduler, fake worker, Trio's autojump clock: every wait is instant and
the order in which leases come is the whole assertion (no timing).
"""

from __future__ import annotations

from collections import Counter

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


async def run_oldest_first(worker: FakeWorker, builds: Builds, held: list[Lease], n: int) -> str:
    """Complete the oldest held lease ``n`` times; the builds of the leases
    that started in its place, in order."""
    started = []
    for _ in range(n):
        worker.complete(held.pop(0))
        lease = await worker.next_lease()
        held.append(lease)
        started.append(builds.of(lease))
    return "".join(started)


async def start(nursery: trio.Nursery, **spec: object) -> tuple[Harness, Builds]:
    harness = await start_harness(nursery, fair_share=FairShareSpec(**spec))  # type: ignore[arg-type]
    return harness, Builds(harness)


async def test_a_second_build_starts_at_the_next_free_slot_and_then_they_alternate(
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
    assert order == "BABABABAAA"  # one slot each until B's four ran, then A alone


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


async def test_equal_shares_go_to_the_build_served_longest_ago(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    # Three slots, two builds: neither can have half, so each gets one and a
    # half on average: 1.5 is held as 2 and 1 in turn.
    harness, builds = await start(nursery)
    worker = await harness.add_worker(worker_info(cpus=3))
    await builds.submit("A", 30)
    held = [await worker.next_lease() for _ in range(3)]
    await builds.submit("B", 30)
    order = await run_oldest_first(worker, builds, held, 24)
    counts = Counter(order)
    assert abs(counts["A"] - counts["B"]) <= 1, order
    running = Counter(builds.of(lease) for lease in held)
    assert sorted(running.values()) == [1, 2]


async def test_weights_of_repositories_divide_the_slots(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    harness, builds = await start(nursery, weights={"big": 2.0})
    worker = await harness.add_worker(worker_info(cpus=3))
    big = RequestInfo(tool_invocation_id="A", repository="big")
    await builds.submit("A", 40, info=big)
    held = [await worker.next_lease() for _ in range(3)]
    await builds.submit("B", 40, info=RequestInfo(tool_invocation_id="B", repository="small"))
    await run_oldest_first(worker, builds, held, 3)  # settle into the shares
    running = Counter(builds.of(lease) for lease in held)
    assert running == Counter({"A": 2, "B": 1})
    order = await run_oldest_first(worker, builds, held, 30)
    assert Counter(order) == Counter({"A": 20, "B": 10}), order
    stats = {b.invocation: b for b in harness.scheduler.statistics().builds}
    assert stats["A"].fair_share == pytest.approx(2 / 3)
    assert stats["B"].fair_share == pytest.approx(1 / 3)
    assert (stats["A"].running, stats["B"].running) == (2, 1)
    assert stats["A"].used_share == pytest.approx(2 / 3)


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
        return {builds.build_of[q.operation_name]: q.waiting_for for q in queued}

    await builds.submit("A", 3)
    first = await worker.next_lease()
    await builds.submit("B", 2)
    worker.complete(first)
    b1 = await worker.next_lease()
    assert builds.of(b1) == "B"
    # A holds nothing now: it is first in line, waiting for the CPU B holds.
    assert await reasons() == {"A": WaitReason.CPU, "B": WaitReason.BUILD_SHARE}
    worker.complete(b1)
    a2 = await worker.next_lease()
    assert builds.of(a2) == "A"
    assert await reasons() == {"A": WaitReason.BUILD_SHARE, "B": WaitReason.CPU}
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
