"""Fair shares between builds: which build the queue serves next.

A build is what ``FairShareSpec.build_key`` names: one ``tool_invocation_id``
(one ``bazel build`` or ``buck2 build`` command) by default. A request
without that field counts under its ``x-lre-repository`` header, else under
its gRPC connection (``RequestInfo.peer``), so two anonymous clients are two
builds and one client's requests stay together.

Each build's ``share`` is its dominant share of what the workers offer: the
larger of the fractions of all CPU and of all memory (the memory budget when
there is one) its running actions reserve, divided by its weight (the
``weights`` of its repository, else 1). The run queue serves the build with
the lowest share first; equal shares go to the build served longest ago;
within a build ``execution_policy.priority`` and then arrival decide. So a
second build's first action starts at the next free slot instead of after
everything queued before it, each build gets the same weighted share while
both wait, a lone build gets the whole machine, and nothing running is ever
stopped for fairness (a share only orders what starts next). Backfill stays:
a build whose next action does not fit yet lets a smaller one of another
build start.

With ``enabled`` false every operation belongs to one build whose share is
never updated, which leaves the order by priority and arrival alone.
"""

from __future__ import annotations

from lre.config import FairShareSpec
from lre.scheduler._model import RequestInfo, Reservation


class Build:
    """One build's standing: what it runs and queues now, and its share."""

    __slots__ = (
        "invocation",
        "key",
        "memory_bytes",
        "millicpus",
        "queued",
        "repository",
        "running",
        "served",
        "share",
        "tool",
        "weight",
    )

    def __init__(self, key: str, info: RequestInfo, weight: float) -> None:
        self.key = key
        self.invocation = info.tool_invocation_id
        self.repository = info.repository
        self.tool = f"{info.tool_name} {info.tool_version}".strip()
        self.weight = weight
        self.queued = 0
        self.running = 0
        self.millicpus = 0
        self.memory_bytes = 0
        #: Weighted dominant share of the capacity its running actions reserve
        #: (kept up to date while there are two builds or more: alone, no
        #: other build's order depends on it).
        self.share = 0.0
        #: When it last started an action (a counter; lower = longer ago).
        self.served = 0


class BuildShares:
    """Every build with queued or running actions, and the capacity shares are
    counted against (``set_capacity``; shares stay 0 while it is unknown)."""

    def __init__(self, spec: FairShareSpec) -> None:
        self.enabled = spec.enabled
        self._key_field = spec.build_key
        self._weights = dict(spec.weights)
        self.builds: dict[str, Build] = {}
        #: The same builds by bare invocation id (the usual key, looked up
        #: without making the key string).
        self._invocations: dict[str, Build] = {}
        self._by_invocation = spec.build_key == "invocation"
        #: Builds with at least one queued operation (fair order matters only
        #: above 1); the run queue keeps it and each ``Build.queued``.
        self.waiting = 0
        self._capacity_cpu = 0
        self._capacity_memory = 0
        self._starts = 0
        self._everyone = Build("", RequestInfo(), 1.0)

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
            build = self._invocations.get(invocation)
            if build is not None:
                return build
        key = self.key_of(info)
        build = self.builds.get(key)
        if build is None:
            weight = self._weights.get(info.repository, 1.0)
            build = self.builds[key] = Build(key, info, weight)
            if self._by_invocation and invocation:
                self._invocations[invocation] = build
            if len(self.builds) == 2:  # shares were left alone while there was one
                for each in self.builds.values():
                    self._reshare(each)
        return build

    def started(self, build: Build, reservation: Reservation) -> None:
        """An action of ``build`` holds ``reservation`` from now on."""
        self._starts += 1
        build.served = self._starts
        build.running += 1
        build.millicpus += reservation.millicpus
        build.memory_bytes += reservation.memory_bytes
        if len(self.builds) > 1:
            self._reshare(build)

    def finished(self, build: Build, reservation: Reservation) -> None:
        """An action of ``build`` released ``reservation``."""
        build.running -= 1
        build.millicpus -= reservation.millicpus
        build.memory_bytes -= reservation.memory_bytes
        if len(self.builds) > 1:
            self._reshare(build)

    def set_capacity(self, millicpus: int, memory_bytes: int) -> None:
        """What all workers offer (memory: the budget when it is smaller)."""
        self._capacity_cpu = millicpus
        self._capacity_memory = memory_bytes
        for build in self.builds.values():
            self._reshare(build)

    def sweep(self) -> None:
        """Forget builds with nothing queued or running."""
        idle = [k for k, b in self.builds.items() if b.queued == 0 and b.running == 0]
        for key in idle:
            build = self.builds.pop(key)
            if self._invocations.get(build.invocation) is build:
                del self._invocations[build.invocation]

    def first_in_line(self) -> tuple[float, int] | None:
        """(share, served) of the waiting build the queue would serve first, or
        None when no build waits."""
        waiting = [(b.share, b.served) for b in self.builds.values() if b.queued]
        return min(waiting) if waiting else None

    def used_fraction(self, build: Build) -> float:
        """The dominant fraction of the capacity ``build`` reserves now (unweighted)."""
        self._reshare(build)  # kept up to date only while builds compete
        return build.share * build.weight

    def fair_fraction(self, build: Build) -> float:
        """The fraction of the machine ``build`` is entitled to now: its weight
        over the weights of every build with work queued or running."""
        total = sum(b.weight for b in self.builds.values() if b.queued or b.running)
        return build.weight / total if total else 1.0

    def _reshare(self, build: Build) -> None:
        cpu = build.millicpus / self._capacity_cpu if self._capacity_cpu else 0.0
        memory = build.memory_bytes / self._capacity_memory if self._capacity_memory else 0.0
        build.share = max(cpu, memory) / build.weight
