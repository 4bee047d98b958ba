"""Fair shares between builds: which build the queue serves next.

A build is what ``FairShareSpec.build_key`` names: one ``tool_invocation_id``
(one ``bazel build`` or ``buck2 build`` command) by default. A request
without that field counts under its ``x-lre-repository`` header, else under
its gRPC connection (``RequestInfo.peer``), so two anonymous clients are two
builds and one client's requests stay together.

Each build's ``share`` is its dominant share of what the workers offer: the
larger of the fractions of all CPU and of all memory (the memory budget when
there is one) its running actions reserve, divided by its weight (the
``weights`` of its repository, else 1). While builds compete, each build's
``usage`` adds up its share over time (share-seconds since builds began to
compete), and the run queue serves the waiting build with the least usage
first; at equal usage the one holding least now, then the one served
longest ago; within a build ``execution_policy.priority`` and then arrival
decide.

Counting over time instead of what each holds this instant matters because
nothing running is ever stopped for fairness: a build that arrives while
another holds every slot must wait for those actions to end, and the other
build's usage grows meanwhile, so the newcomer gets the slots that free next
until its usage has caught up (up to the whole machine for a moment), not
just its instantaneous share. Credit is earned only by waiting: a build that
starts waiting (a new build, or one whose queue had run dry) is raised to
the least usage among the other active builds (never lowered), so a build
that had nothing to run brings no credit. A lone build gets the whole
machine and its usage is not kept at all. Backfill stays: a build whose next
action does not fit yet lets a smaller one of another build start.

With ``enabled`` false every operation belongs to one build whose share is
never updated, which leaves the order by priority and arrival alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from lre.config import FairShareSpec
from lre.scheduler._model import RequestInfo, Reservation


@dataclass(eq=False, slots=True)
class Build:
    """One build's standing: what it runs and queues now, and its share.
    ``tool`` is its client's "name version"."""

    key: str
    invocation: str = ""
    repository: str = ""
    tool: str = ""
    weight: float = 1.0
    queued: int = 0
    running: int = 0
    millicpus: int = 0
    memory_bytes: int = 0
    #: Weighted dominant share of the capacity its running actions reserve
    #: (kept up to date while there are two builds or more: alone, no
    #: other build's order depends on it).
    share: float = 0.0
    #: Share-seconds up to ``since`` (a clock reading), while builds compete.
    usage: float = 0.0
    since: float = 0.0
    #: Its usage as of the queue's last look (what the queue orders by).
    rank: float = 0.0
    #: When it last started an action while builds competed (a counter;
    #: lower = longer ago).
    served: int = 0

    def usage_at(self, now: float) -> float:
        """Its share-seconds up to ``now``."""
        return self.usage + self.share * (now - self.since)


class BuildShares:
    """Every build with queued or running actions, and the capacity shares are
    counted against (``set_capacity``; shares stay 0 while it is unknown).
    ``clock`` reads the time usage is counted in (seconds)."""

    def __init__(self, spec: FairShareSpec, clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = spec.enabled
        self._key_field = spec.build_key
        self._weights = dict(spec.weights)
        self._clock = clock
        self.builds: dict[str, Build] = {}
        #: The same builds by bare invocation id (the usual key, looked up
        #: without making the key string).
        self.by_invocation: dict[str, Build] = {}
        self._by_invocation = spec.build_key == "invocation"
        #: Two builds or more are known: shares, usage and ``served`` are kept
        #: up to date only then (alone, no other build's order depends on them).
        self.competing = False
        #: Builds with at least one queued operation (fair order matters only
        #: above 1); the run queue keeps it and each ``Build.queued``.
        self.waiting = 0
        #: The fraction of the capacity one millicpu and one byte are (0
        #: while the capacity is unknown).
        self._per_millicpu = 0.0
        self._per_byte = 0.0
        self._starts = 0
        self._everyone = Build("")

    def key_of(self, info: RequestInfo) -> str:
        """The build ``info`` belongs to (see the module docstring)."""
        field = self._key_field
        if field == "invocation" and info.tool_invocation_id:
            return "invocation:" + info.tool_invocation_id
        if field == "correlated_invocations" and info.correlated_invocations_id:
            return "correlated:" + info.correlated_invocations_id
        if info.repository:
            return "repository:" + info.repository
        if info.peer:
            return "connection:" + info.peer
        return "anonymous"

    def build_of(self, info: RequestInfo) -> Build:
        """The ``Build`` of ``info``, made when it has none yet."""
        if not self.enabled:
            return self._everyone
        invocation = info.tool_invocation_id
        if self._by_invocation and invocation:
            build = self.by_invocation.get(invocation)
            if build is not None:
                return build
        key = self.key_of(info)
        build = self.builds.get(key)
        if build is None:
            build = self.builds[key] = Build(
                key,
                invocation=info.tool_invocation_id,
                repository=info.repository,
                tool=f"{info.tool_name} {info.tool_version}".strip(),
                weight=self._weights.get(info.repository, 1.0),
            )
            if self._by_invocation and invocation:
                self.by_invocation[invocation] = build
            if not self.competing and len(self.builds) > 1:
                # Builds begin to compete: every usage counts from now.
                self.competing = True
                now = self._clock()
                for each in self.builds.values():
                    self._reshare(each)
                    each.usage, each.since = 0.0, now
        return build

    def starts_waiting(self, build: Build) -> None:
        """``build`` had nothing queued and now has: it starts at no less than
        the least usage of the other active builds (no credit for a time it
        had nothing to run)."""
        if not self.competing:
            return
        now = self._clock()
        floor = min(
            (
                b.usage_at(now)
                for b in self.builds.values()
                if b is not build and (b.queued or b.running)
            ),
            default=None,
        )
        mine = build.usage_at(now)
        build.usage, build.since = (mine if floor is None else max(mine, floor)), now

    def started(self, build: Build, reservation: Reservation) -> None:
        """An action of ``build`` holds ``reservation`` from now on."""
        build.running += 1
        build.millicpus += reservation.millicpus
        build.memory_bytes += reservation.memory_bytes
        if self.competing:
            self._starts += 1
            build.served = self._starts
            self._restate(build)

    def finished(self, build: Build, reservation: Reservation) -> None:
        """An action of ``build`` released ``reservation``."""
        build.running -= 1
        build.millicpus -= reservation.millicpus
        build.memory_bytes -= reservation.memory_bytes
        if self.competing:
            self._restate(build)

    def set_capacity(self, millicpus: int, memory_bytes: int) -> None:
        """What all workers offer (memory: the budget when it is smaller)."""
        self._per_millicpu = 1 / millicpus if millicpus > 0 else 0.0
        self._per_byte = 1 / memory_bytes if memory_bytes > 0 else 0.0
        if self.competing:
            for build in self.builds.values():
                self._restate(build)

    def sweep(self) -> None:
        """Forget builds with nothing queued or running."""
        idle = [k for k, b in self.builds.items() if b.queued == 0 and b.running == 0]
        for key in idle:
            build = self.builds.pop(key)
            if self.by_invocation.get(build.invocation) is build:
                del self.by_invocation[build.invocation]
        if len(self.builds) < 2:
            self.competing = False

    def rank_waiting(self) -> tuple[float, float, int] | None:
        """Set each waiting build's ``rank`` to its usage now (the queue looks
        only at builds with something queued); (rank, share, served) of the
        one the queue would serve first, None when none waits."""
        now = self._clock()
        first: tuple[float, float, int] | None = None
        for build in self.builds.values():
            if build.queued:
                share = build.share
                build.rank = build.usage + share * (now - build.since)
                mine = (build.rank, share, build.served)
                if first is None or mine < first:
                    first = mine
        return first

    def used_fraction(self, build: Build) -> float:
        """The dominant fraction of the capacity ``build`` reserves now (unweighted)."""
        cpu = build.millicpus * self._per_millicpu
        memory = build.memory_bytes * self._per_byte
        return max(cpu, memory)

    def fair_fraction(self, build: Build) -> float:
        """The fraction of the machine ``build`` is entitled to now: its weight
        over the weights of every build with work queued or running."""
        total = sum(b.weight for b in self.builds.values() if b.queued or b.running)
        return build.weight / total if total else 1.0

    def _restate(self, build: Build) -> None:
        """Book ``build``'s usage up to now, then take its new share."""
        now = self._clock()
        build.usage += build.share * (now - build.since)
        build.since = now
        cpu = build.millicpus * self._per_millicpu
        memory = build.memory_bytes * self._per_byte
        build.share = (cpu if cpu > memory else memory) / build.weight

    def _reshare(self, build: Build) -> None:
        build.share = self.used_fraction(build) / build.weight
