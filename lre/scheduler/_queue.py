"""The run queue: queued operations in buckets of equal needs, and leasing.

Operations of one build (``_fair_share``) that need the same thing (exact
and present properties, sized reservation, whole-worker or not, timeout)
share a ``Bucket``, a heap ordered by (priority, submission order): lower
``execution_policy.priority`` runs sooner, as the REAPI says, FIFO within a
priority. A worker takes the best head among the buckets it can run right
now, best by (its build's usage, its share now, when it was last served,
priority, order): the build that has had least of the machine goes first
(at equal usage the one holding least now), and a small
action may overtake a large one that does not fit yet (backfill), also one
of another build.

Each time a bucket's head cannot start for want of something (CPU, memory
budget, host memory, an idle worker, a worker slot) the bucket notes it
(``Bucket.block``); an operation leaving the queue takes the reasons noted
while it was there into ``OperationState.waited_for``, and
``Bucket.waiting_for`` says what the head waits for now (``/status``, TUI).
A head that could have started but another build's went first, that build
having had less, waits for ``WaitReason.BUILD_SHARE``. While one build alone
waits, the order is its own: (priority, order), with no usage worked out.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lre.config import FairShareSpec
from lre.scheduler._fair_share import Build, BuildShares
from lre.scheduler._matching import Requirements, matches_statically
from lre.scheduler._model import Reservation, ResourcePolicy
from lre.scheduler._records import OperationState, WorkerState
from lre.snapshot import WaitReason

HeapEntry = tuple[int, int, int, OperationState]


@dataclass(eq=False, repr=False, slots=True)
class Bucket:
    """Queued operations that need the same thing, ordered by (priority, seq)."""

    key: tuple[Any, ...]
    requirements: Requirements
    exclusive: bool
    timeout_s: float
    build: Build
    heap: list[HeapEntry] = field(default_factory=list)
    live: int = 0
    matches: dict[str, bool] = field(default_factory=dict)
    label: str = field(init=False)
    #: The platform alone (no sized reservation): what the queue is grouped by.
    platform: str = field(init=False)
    blocks: int = 0
    blocked: dict[str, int] = field(default_factory=dict)
    waiting_for: str = ""

    def __post_init__(self) -> None:
        self.label = self.requirements.label() + (",exclusive" if self.exclusive else "")
        self.platform = self.requirements.platform_label()

    def block(self, reason: str) -> None:
        """The head could not start for want of ``reason`` (a ``WaitReason``)."""
        self.blocks += 1
        self.blocked[reason] = self.blocks
        self.waiting_for = reason

    def leave(self, op: OperationState) -> None:
        """``op`` leaves the queue to run: it takes the reasons noted since it came."""
        mark = op.wait_mark
        for reason, block in self.blocked.items():
            if block > mark:
                op.waited_for.add(reason)
        self.waiting_for = ""

    def head(self) -> HeapEntry | None:
        """The first live entry; stale ones (requeued or finished) are dropped."""
        heap = self.heap
        while heap:
            entry = heap[0]
            op = entry[3]
            if op.ticket == entry[2] and op.bucket is self:
                return entry
            heapq.heappop(heap)
        return None


class RunQueue:
    """Buckets of queued operations; ``take`` picks what a worker runs next.

    ``available_memory`` (optional) returns the host's available memory; an
    action does not start while it reserves more than that unless nothing
    is running. ``vetoed`` records that this happened, so the scheduler
    retries later (memory may come back without any event). ``memory_frozen``
    (optional) says whether that veto is the memory control holding starts
    while it keeps actions frozen (the wait is then ``frozen``, not ``host
    memory``). ``fair_share`` says how builds share the workers
    (``_fair_share``; the default shares them); the scheduler tells
    ``shares`` what starts and ends (``started``/``finished`` with the
    operation's ``build``) and what the workers offer (``set_capacity``);
    ``clock`` is the time their usage is counted in.
    """

    def __init__(
        self,
        resources: ResourcePolicy,
        available_memory: Callable[[], int] | None,
        memory_frozen: Callable[[], bool] | None = None,
        fair_share: FairShareSpec | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._resources = resources
        self._available_memory = available_memory
        self._memory_frozen = memory_frozen
        self.buckets: dict[tuple[Any, ...], Bucket] = {}
        self.shares = BuildShares(fair_share or FairShareSpec(), clock)
        self.vetoed = False

    def push(self, op: OperationState) -> None:
        """Queue ``op`` (already sized) in the bucket of its needs."""
        requirements = op.requirements
        assert requirements is not None
        r = op.reservation
        timeout = op.requested_timeout_s or 0.0
        build = op.build
        if build is None:
            info = op.request_info
            build = self.shares.by_invocation.get(info.tool_invocation_id)
            if build is None:
                build = self.shares.build_of(info)
            op.build = build
        key = (
            build.key,
            requirements.exact,
            requirements.present,
            r.millicpus,
            r.memory_bytes,
            tuple(sorted(r.extra.items())),
            op.exclusive,
            timeout,
        )
        bucket = self.buckets.get(key)
        if bucket is None:
            sized = Requirements(requirements.exact, requirements.present, r)
            bucket = self.buckets[key] = Bucket(key, sized, op.exclusive, timeout, build)
        op.ticket += 1
        op.bucket = bucket
        op.wait_mark = bucket.blocks
        bucket.live += 1
        build.queued += 1
        if build.queued == 1:
            self.shares.waiting += 1
            self.shares.starts_waiting(build)
        heapq.heappush(bucket.heap, (op.priority, op.seq, op.ticket, op))

    def remove(self, op: OperationState) -> None:
        """Take ``op`` out of its bucket (its heap entry becomes stale)."""
        bucket = op.bucket
        if bucket is not None:
            bucket.live -= 1
            self._unqueued(bucket.build)
            op.bucket = None
            op.ticket += 1

    def _unqueued(self, build: Build) -> None:
        build.queued -= 1
        if build.queued == 0:
            self.shares.waiting -= 1

    def forget_worker(self, name: str) -> None:
        """Drop cached match results for worker ``name`` (new or changed description)."""
        for bucket in self.buckets.values():
            bucket.matches.pop(name, None)

    def sweep(self) -> None:
        """Drop empty buckets and builds with nothing queued or running."""
        for key in [k for k, b in self.buckets.items() if b.live == 0]:
            del self.buckets[key]
        self.shares.sweep()

    def queued_by_platform(self) -> Counter[str]:
        """Queued operations per platform (not split by sized reservation)."""
        return self._queued_by(lambda bucket: bucket.platform)

    def queued_by_reservation(self) -> Counter[str]:
        """Queued operations per bucket label (platform and sized reservation)."""
        return self._queued_by(lambda bucket: bucket.label)

    def _queued_by(self, key: Callable[[Bucket], str]) -> Counter[str]:
        counts: Counter[str] = Counter()
        for bucket in self.buckets.values():
            if bucket.live:
                counts[key(bucket)] += bucket.live
        return counts

    def next_queued(self, limit: int) -> list[tuple[OperationState, Bucket]]:
        """The ``limit`` operations that would run first, by (their build's
        usage, its share now, when it was last served, priority, order) as
        things stand."""
        if self.shares.competing:
            self.shares.rank_waiting()
        else:
            for build in self.shares.builds.values():
                build.rank = 0.0
        entries = [
            (
                bucket.build.rank,
                bucket.build.share,
                bucket.build.served,
                entry[0],
                entry[1],
                entry[3],
                bucket,
            )
            for bucket in self.buckets.values()
            if bucket.live
            for entry in heapq.nsmallest(limit, bucket.heap)
            if entry[3].ticket == entry[2] and entry[3].bucket is bucket
        ]
        entries.sort(key=lambda e: e[:5])
        return [(e[5], e[6]) for e in entries[:limit]]

    def take(
        self, state: WorkerState, memory_reserved: int, running: int
    ) -> tuple[OperationState, Reservation, bool] | None:
        """Pop the operation ``state`` should run now, with the reservation it
        holds and whether it takes the whole worker; None when nothing fits
        (draining, ``max_inflight`` reached, nothing matches or fits)."""
        info = state.info
        if state.draining:
            return None
        if info.max_inflight and len(state.leases) >= info.max_inflight:
            for bucket in self.buckets.values():
                if bucket.live and bucket.matches.get(info.name):
                    bucket.block(WaitReason.WORKER_SLOTS)
            return None
        # What is free, in the two amounts every action names (a Reservation
        # is made only for an action with extra amounts: making one costs
        # more than the rest of a take that finds nothing to start).
        capacity, reserved = info.capacity, state.reserved
        free_cpu = capacity.millicpus - reserved.millicpus
        free_memory = capacity.memory_bytes - reserved.memory_bytes
        budget = self._resources.memory_budget_bytes
        budget_free = math.inf if budget is None else budget - memory_reserved
        available: float | None = None
        best: Bucket | None = None
        best_order: tuple[Any, ...] | None = None
        best_memory = 0
        # Heads passed over for another build's, and the most entitled waiting
        # build (only when builds compete).
        competing = self.shares.waiting > 1
        passed: list[Bucket] | None = None
        first_in_line: tuple[float, float, int] | None = None
        if competing:
            passed = []
            first_in_line = self.shares.rank_waiting()
        for bucket in self.buckets.values():
            head = bucket.head()
            if head is None:
                continue
            if competing:
                build = bucket.build
                order: tuple[Any, ...] = (build.rank, build.share, build.served, head[0], head[1])
            else:  # one build waits: (priority, order) alone, as its own heap has it
                order = head
            if best_order is not None and order >= best_order:
                if passed is not None:
                    passed.append(bucket)
                continue
            matches = bucket.matches.get(info.name)
            if matches is None:
                matches = matches_statically(bucket.requirements, info) and (
                    bucket.timeout_s <= info.max_action_timeout_s
                )
                bucket.matches[info.name] = matches
            if not matches:
                continue
            if bucket.exclusive:
                if state.leases or (budget is not None and memory_reserved > 0):
                    bucket.block(WaitReason.IDLE_WORKER)
                    continue
                memory = min(info.capacity.memory_bytes, budget or info.capacity.memory_bytes)
            else:
                reservation = bucket.requirements.reservation
                if (
                    reservation.millicpus > free_cpu
                    or reservation.memory_bytes > free_memory
                    or (reservation.extra and not reservation.fits_in(capacity - reserved))
                ):
                    short_of_memory = reservation.memory_bytes > free_memory
                    build = bucket.build
                    if (
                        first_in_line is not None
                        and (build.rank, build.share, build.served) > first_in_line
                    ):
                        # Another build has had less of the machine: it gets what frees first.
                        bucket.block(WaitReason.BUILD_SHARE)
                    else:
                        bucket.block(
                            WaitReason.MEMORY_BUDGET if short_of_memory else WaitReason.CPU
                        )
                    continue
                memory = reservation.memory_bytes
                if memory > budget_free:
                    bucket.block(WaitReason.MEMORY_BUDGET)
                    continue
            if memory and self._available_memory is not None and running > 0:
                if available is None:
                    available = float(self._available_memory())
                if memory > available:
                    self.vetoed = True
                    frozen = self._memory_frozen is not None and self._memory_frozen()
                    bucket.block(WaitReason.FROZEN if frozen else WaitReason.HOST_MEMORY)
                    continue
            if passed is not None and best is not None:
                passed.append(best)
            best, best_order, best_memory = bucket, order, memory
        if best is None:
            return None
        if passed:
            for bucket in passed:
                if bucket.build is best.build or bucket.exclusive:
                    continue
                wanted = bucket.requirements.reservation
                if (
                    bucket.matches.get(info.name)
                    and wanted.millicpus <= free_cpu
                    and wanted.memory_bytes <= free_memory
                    and (not wanted.extra or wanted.fits_in(capacity - reserved))
                ):
                    bucket.block(WaitReason.BUILD_SHARE)
        entry = heapq.heappop(best.heap)
        op = entry[3]
        best.live -= 1
        build = best.build
        build.queued -= 1
        if build.queued == 0:
            self.shares.waiting -= 1
        best.leave(op)
        op.bucket = None
        op.ticket += 1
        if best.exclusive:
            reservation = Reservation(info.capacity.millicpus, best_memory, info.capacity.extra)
        else:
            reservation = best.requirements.reservation
        return op, reservation, best.exclusive
