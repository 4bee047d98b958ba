"""The composition root: every live object of lre is built here from a Config.

``Application(config)`` calls one builder per kind, in order: stores
(``_stores``), schedulers (``_build_schedulers``), workers
(``_build_workers``) and gRPC servers (``_build_servers``); nothing starts.
``Application.serve`` runs them in two nested nurseries: core (schedulers,
forwarders, the bridge, the learner, containment watchers, workers) and,
inside it, front (gRPC listeners, the status listener).
Shutdown order, on ``request_stop``: the front nursery is cancelled first
(clients see UNAVAILABLE), then the core one (each running action is killed
and reaped), then stores are closed and the learner is flushed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

import trio

from lre.app._build_schedulers import (
    build_forwarders,
    build_learner,
    build_schedulers,
    front_scheduler,
)
from lre.app._build_servers import build_servers
from lre.app._build_workers import build_pressure_monitors, build_workers
from lre.app._cache_admin import CacheAdmin, write_admin_token
from lre.app._events import EventLog
from lre.app._health import HealthBoard, free_space_check
from lre.app._history import HistoryRecorder
from lre.app._hits import ClientHits, HitCounts
from lre.app._memory_events import MemoryEventRecorder
from lre.app._miss_report import MissReport, MissWatch
from lre.app._scheduler_chain import scheduler_chain
from lre.app._snapshot import SnapshotAssembler
from lre.app._status_http import StatusServer
from lre.app._stores import Stores, build_stores
from lre.app._upstreams import upstream_rows
from lre.cas import StoreStatistics
from lre.config import (
    Config,
    SchedulerResourceSpec,
    WorkerResources,
    nearest_existing_dir,
    scheduler_resources,
    state_dir_of,
    worker_resources,
)
from lre.scheduler import ForwardScheduler, Scheduler, SchedulerEvent
from lre.service import InvocationSpans, LocalPeers, RpcMetrics, TrioBridge
from lre.snapshot import EventKind, JobserverTokens, MemoryControlRow
from lre.upstream import UpstreamStatistics
from lre.worker import Containment, LocalWorker, missing_protections, namespace_refusals

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReadyInfo:
    """Where a started lre listens."""

    grpc_addresses: tuple[str, ...]
    status_address: str


class Application:
    """Everything one lre process runs; see the module docstring."""

    def __init__(self, config: Config) -> None:
        """Build every part from ``config`` (nothing starts).

        Raises ``StoreBuildError`` or ``AppBuildError`` naming the block
        whose objects cannot be built.
        """
        self.config = config
        self._stop = trio.Event()
        #: Set once ``serve`` has shut everything down.
        self.stopped = trio.Event()
        # 1. stores
        self.stores: Stores = build_stores(config)
        self.events = EventLog()
        self.health = HealthBoard()
        self.health.add_check(
            "disk", free_space_check(nearest_existing_dir(str(state_dir_of(config))), 1 << 30)
        )
        #: Every finished action, in the state dir (None when turned off).
        self.history: HistoryRecorder | None = None
        if config.global_.history.enabled:
            self.history = HistoryRecorder(
                state_dir_of(config),
                max_bytes=int(config.global_.history.max_bytes),
                reserved=self._reserved_now,
                spans=InvocationSpans(),
            )
        for upstream in self.stores.upstreams:
            upstream.client.health.on_change = self._upstream_changed
        # 2. schedulers, and what they share with the workers
        #: Each local worker's numbers, "auto" worked out once (by config's rules).
        self.worker_resources: dict[str, WorkerResources] = {
            worker.local.name: worker_resources(
                worker.local, scheduler=scheduler_resources(config, worker.local.scheduler)
            )
            for worker in config.workers
            if worker.local is not None
        }
        budgets = [r.memory_budget_bytes for r in self.worker_resources.values()]
        if self.history is not None and budgets and all(budgets):
            self.history.memory_budget_bytes = sum(budgets)  # the report's memory scale
        pressure = build_pressure_monitors(config)
        self.learner = build_learner(config)
        self.schedulers: dict[str, Scheduler] = build_schedulers(
            config,
            self.stores,
            learner=self.learner,
            pressure=pressure,
            on_event=self._record_event,
            on_record=self.history.record_later if self.history is not None else None,
        )
        #: Forward schedulers by name (each wraps a local scheduler).
        self.forwarders: dict[str, ForwardScheduler] = build_forwarders(
            config, self.stores, self.schedulers, on_upstream_change=self._upstream_changed
        )
        # 3. workers, with one containment backend per mode (shared by its workers)
        self.workers: list[LocalWorker]
        self.containments: dict[str, Containment]
        self.workers, self.containments = build_workers(
            config,
            self.stores,
            self.schedulers,
            resources=self.worker_resources,
            pressure=pressure,
        )
        # what /status, /metrics and the TUI read
        self.bridge = TrioBridge()
        self.rpc_metrics = RpcMetrics()
        #: Tells lre's listeners whether a client is one of lre's own actions;
        #: only while some backend in use leaves its actions on lre's own
        #: network (``portable``). Under ``pidns`` and ``userns`` lre's
        #: listeners do not exist for an action, so no call is judged.
        self.local_peers: LocalPeers | None = (
            LocalPeers(self._action_roots)
            if any(not c.hides_listeners for c in self.containments.values())
            else None
        )
        self._first_scheduler = next(iter(self.schedulers.values()), None)
        self.assembler = self._build_assembler()
        for worker in self.workers:  # freezes and thaws as events, named by target
            worker.memory.on_event = MemoryEventRecorder(
                self.events, worker.name, self.schedulers[worker.spec.scheduler].statistics
            )
        self.hits: ClientHits | None = None
        self.miss_report = MissReport(self._miss_watches())
        self.assembler.cache_notices = self.miss_report.notices
        # 4. servers
        self.servers = build_servers(
            config,
            self.stores,
            front=lambda name: front_scheduler(config, name, self.schedulers, self.forwarders),
            bridge=self.bridge,
            rpc_metrics=self.rpc_metrics,
            local_peers=self.local_peers,
            history=self.history,
        )

    def _build_assembler(self) -> SnapshotAssembler:
        """The snapshot assembler over every part (addresses filled in by ``serve``)."""
        first = self._first_scheduler
        assembler = SnapshotAssembler(
            address="",
            status_address="",
            scheduler=first.statistics if first is not None else None,
            usage=lambda: [u for w in self.workers for u in w.sampler.snapshots()],
            stores=self._store_statistics,
            jobserver=self._jobserver_tokens,
            events=self.events,
            health=self.health,
            upstreams=lambda: upstream_rows(
                self.stores.upstream_statistics(),
                [f.forward_statistics() for f in self.forwarders.values()],
            ),
            kill_factor=self._kill_factor(),
            history=self.history,
        )
        assembler.containment = self._containment_summary()
        assembler.memory_control = self._memory_control_rows
        return assembler

    def _reserved_now(self) -> tuple[int, int, int]:
        """Reserved millicpus and memory bytes, and running actions, over all schedulers."""
        millicpus = memory = running = 0
        for scheduler in dict.fromkeys(self.schedulers.values()):
            cpu, mem, run = scheduler.reserved()
            millicpus, memory, running = millicpus + cpu, memory + mem, running + run
        return millicpus, memory, running

    def _kill_factor(self) -> float:
        """The kill factor of the scheduler the snapshot shows (the first)."""
        first = next(iter(self.config.schedulers), None)
        if first is None:
            return SchedulerResourceSpec().kill_factor
        return scheduler_chain(self.config, first.name).simple.resources.kill_factor

    def _action_roots(self) -> list[int]:
        """(any thread) the processes every running action's processes are or
        descend from, over every containment backend in use."""
        return [pid for c in list(self.containments.values()) for pid in c.action_roots()]

    def protections_missing(self) -> tuple[str, ...]:
        """What this lre cannot give its actions here (empty when nothing is
        missing): per containment backend in use, and lre's listener guard;
        followed by the kernel settings that refuse namespaces, if any."""
        missing: list[str] = []
        for worker in self.workers:
            texts = list(missing_protections(worker.containment.name))
            outside = worker.containment.network_missing()
            if outside is not None:
                texts.append(f"addresses outside this machine for its actions ({outside})")
            peak = worker.containment.peak_missing()
            if peak is not None:
                texts.append(f"the kernel's memory figure of its short actions ({peak})")
            if worker.identity is None:  # its actions run as lre's user
                texts.extend(worker.containment.root_actions_missing())
            for text in texts:
                line = f"{worker.name}: {text}"
                if line not in missing:
                    missing.append(line)
        if self.local_peers is not None and not self.local_peers.available:
            missing.append("lre's listeners refusing its own actions (needs Linux sock_diag)")
        if missing:
            missing.extend(f"because {refusal}" for refusal in namespace_refusals())
        return tuple(missing)

    def _containment_summary(self) -> str:
        """``pidns`` when every worker uses it, else ``name=mode`` per worker."""
        modes = {worker.name: worker.containment.name for worker in self.workers}
        if len(set(modes.values())) <= 1:
            return next(iter(modes.values()), "")
        return ", ".join(f"{name}={mode}" for name, mode in modes.items())

    def _store_statistics(self) -> dict[str, StoreStatistics]:
        out: dict[str, StoreStatistics] = {}
        for name, store in self.stores.blobs.items():
            statistics = store.capabilities().statistics
            if statistics is not None:
                out[name] = statistics()
        return out

    def _jobserver_tokens(self) -> JobserverTokens:
        """Tokens in use / total over every running action's jobserver pool."""
        counts = [w.jobserver_tokens() for w in self.workers]
        return JobserverTokens(sum(c[0] for c in counts), sum(c[1] for c in counts))

    def _upstream_changed(self, upstream: UpstreamStatistics) -> None:
        """An upstream went down or came back: an ``upstream`` event (its
        circuit breaker already logged it). Builds go on local-only meanwhile,
        so lre's health is not affected."""
        if upstream.healthy:
            message = f"upstream {upstream.name} ({upstream.address}) is reachable again"
        else:
            message = (
                f"upstream {upstream.name} ({upstream.address}) is unreachable "
                f"({upstream.last_error}); continuing local-only"
            )
        self.events.add(EventKind.UPSTREAM, message)

    def _record_event(self, event: SchedulerEvent) -> None:
        """Scheduler events go to the recent-events pane of the TUI and /metrics;
        a worker's health changes also go to the health board (``/status``)."""
        if event.kind is EventKind.WORKER and event.worker:
            key = f"worker:{event.worker}"
            if event.healthy:
                self.health.clear(key)
            else:
                self.health.report(key, event.message)
        self.events.add(
            event.kind,
            event.message,
            summary=event.summary or "",
            worker=event.worker or "",
            peak_rss_bytes=event.peak_rss_bytes,
            target=event.target,
        )

    def _memory_control_rows(self) -> tuple[MemoryControlRow, ...]:
        """Each local worker's memory control (``ProcessSnapshot.memory_control``)."""
        return tuple(worker.memory.statistics() for worker in self.workers)

    async def serve(
        self,
        *,
        on_ready: Callable[[ReadyInfo], None] | None = None,
        task_status: trio.TaskStatus[ReadyInfo] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run until cancelled; ``task_status.started`` gets the bound addresses.

        Raises what a part raises at start-up (a port in use, a locked work
        directory) after stopping the parts already started.
        """
        if os.geteuid() == 0:
            as_root = [w.name for w in self.workers if w.identity is None]
            if as_root:
                log.warning(
                    "running as root: actions of worker(s) %s run as root too (action_user; "
                    "in a pidns view as uid 0 without administrative capabilities, "
                    "docs/security.md); run lre as your own user where unprivileged user "
                    "namespaces work, as root only where they do not",
                    ", ".join(as_root),
                )
            for worker in self.workers:
                if worker.identity is not None:
                    log.info(
                        "worker %s: actions run as %s (uid %d, gid %d), unprivileged",
                        worker.name,
                        worker.identity.name,
                        worker.identity.uid,
                        worker.identity.gid,
                    )
        if self.workers:
            log.info("containment of action processes: %s", self.assembler.containment)
        for missing in self.protections_missing():
            log.warning("protection missing: %s", missing)
        os.makedirs(state_dir_of(self.config), mode=0o700, exist_ok=True)
        self.hits = ClientHits(str(state_dir_of(self.config)), self._live_hits)
        self.assembler.hits = self.hits.totals
        await self.stores.open()
        try:
            async with trio.open_nursery() as core:
                for scheduler in dict.fromkeys(self.schedulers.values()):
                    await core.start(scheduler.run)
                for forwarder in self.forwarders.values():
                    await core.start(forwarder.run)
                await core.start(self.bridge.run)
                if self.history is not None:
                    await core.start(self.history.run)
                await core.start(self.stores.save_uses)
                await core.start(self.hits.run)
                await core.start(self.miss_report.run)
                if self.learner is not None:
                    await core.start(self.learner.run)
                for containment in self.containments.values():
                    await core.start(containment.watch)
                for worker in self.workers:
                    await core.start(worker.run)
                async with trio.open_nursery() as front:
                    addresses: list[str] = []
                    for server in self.servers:
                        addresses.append(await front.start(server.serve))
                    self.assembler.address = ", ".join(addresses)
                    status_address = ""
                    if self.config.global_.status.address:
                        status = StatusServer(
                            self.config.global_.status.address,
                            self.assembler,
                            rpc=self.rpc_metrics.statistics,
                            local_peers=self.local_peers,
                            admin=self._cache_admin(),
                            admin_token=write_admin_token(str(state_dir_of(self.config))),
                            protections_missing=self.protections_missing(),
                            flush_history=(
                                self.history.flush if self.history is not None else None
                            ),
                        )
                        await front.start(status.serve)
                        status_address = status.bound_address
                        self.assembler.status_address = status_address
                    ready = ReadyInfo(
                        grpc_addresses=tuple(addresses), status_address=status_address
                    )
                    if on_ready is not None:
                        on_ready(ready)
                    task_status.started(ready)
                    await self._stop.wait()
                    log.info("stopping: gRPC listeners first")
                    front.cancel_scope.cancel()
                log.info("stopping: workers (running actions are killed), then schedulers")
                core.cancel_scope.cancel()
        finally:
            await self.stores.close()
            if self.local_peers is not None:
                self.local_peers.close()
            if self.learner is not None:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self.learner.close)
            self.stopped.set()
            log.info("stopped")

    def _miss_watches(self) -> list[MissWatch]:
        """The upstream action caches the instances look in, with their CAS."""
        watches: dict[str, MissWatch] = {}
        for server in self.config.servers:
            for instance in server.instances:
                cache = self.stores.fast_slow_caches.get(instance.ac_store or "")
                if cache is not None and instance.ac_store not in watches:
                    watches[instance.ac_store] = MissWatch(
                        instance.ac_store, cache, self.stores.blob(instance.cas_store)
                    )
        return list(watches.values())

    def _live_hits(self) -> HitCounts:
        """This run's client-visible hits: GetActionResult answers that found a
        result (OK), Execute calls answered from the action cache, and the
        executions that ran."""
        found = 0
        for method in self.rpc_metrics.statistics().methods:
            if method.method == "ActionCache/GetActionResult":
                found = method.codes.get("OK", 0)
        first = self._first_scheduler
        if first is None:
            return HitCounts(get_action_result_hits=found)
        stats = first.statistics()
        ran = max(0, stats.submitted - stats.dedup_hits - stats.cache_hits)
        return HitCounts(found, stats.cache_hits, ran)

    async def _zero_hits(self) -> None:
        if self.hits is not None:
            self.hits.zero()
        await trio.lowlevel.checkpoint()

    def _cache_admin(self) -> CacheAdmin:
        """What ``lre cache gc``/``clean`` change through the running server:
        the filesystem stores and action caches, by config name."""
        return CacheAdmin(
            blob_stores=dict(self.stores.filesystems),
            action_caches=dict(self.stores.filesystem_caches),
            zero_hits=self._zero_hits,
        )

    def request_stop(self) -> None:
        """Begin the ordered shutdown of ``serve`` (safe to call repeatedly)."""
        self._stop.set()
