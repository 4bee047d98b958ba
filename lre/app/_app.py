"""The composition root: every live object of lre is built here from a Config.

``Application(config)`` builds stores, schedulers, workers and gRPC servers
(nothing starts); ``Application.serve`` runs them in two nested nurseries:
core (schedulers, forwarders, the bridge, the learner, containment watchers,
workers) and, inside it, front (gRPC listeners, the status listener).
Shutdown order, on ``request_stop``: the front nursery is cancelled first
(clients see UNAVAILABLE), then the core one (each running action is killed
and reaped), then stores are closed and the learner is flushed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from lre.app._cache_admin import CacheAdmin, write_admin_token
from lre.app._events import EventLog
from lre.app._health import HealthBoard, free_space_check
from lre.app._history import HistoryRecorder
from lre.app._hits import ClientHits, HitCounts
from lre.app._memory_events import MemoryEventRecorder
from lre.app._miss_report import MissReport, MissWatch
from lre.app._snapshot import SnapshotAssembler
from lre.app._status_http import StatusServer
from lre.app._stores import Stores, build_stores
from lre.app._upstreams import upstream_rows
from lre.cas import (
    FastSlowActionCache,
    FilesystemActionCache,
    FilesystemStore,
    GrpcStore,
    StoreStatistics,
)
from lre.config import (
    Config,
    ForwardSchedulerSpec,
    LocalWorkerSpec,
    PropertyModification,
    SchedulerSpec,
    SimpleSchedulerSpec,
    WorkerResources,
    worker_resources,
)
from lre.scheduler import (
    ActionScheduler,
    ForwardScheduler,
    ReservationLearner,
    ResourcePolicy,
    Scheduler,
    SchedulerEvent,
    UpstreamExecutor,
)
from lre.service import (
    CacheServiceOptions,
    ExecutionServicer,
    GrpcServer,
    InstanceBackends,
    Instances,
    LocalPeers,
    LookupHits,
    OperationsServicer,
    RpcMetrics,
    ServerOptions,
    TrioBridge,
    auth_interceptors,
    cache_servicers,
)
from lre.snapshot import EventKind, JobserverTokens, MemoryControlRow
from lre.upstream import UpstreamClient, UpstreamStatistics
from lre.worker import (
    Containment,
    ContainmentUnavailable,
    LocalWorker,
    PressureMonitor,
    choose_containment,
    missing_protections,
    namespace_refusals,
)

log = logging.getLogger(__name__)


class AppBuildError(Exception):
    """The config is valid but its objects cannot be built (names the block)."""


@dataclass(frozen=True, slots=True)
class ReadyInfo:
    """Where a started lre listens."""

    grpc_addresses: tuple[str, ...]
    status_address: str


def _lre_directories(config: Config) -> tuple[str, ...]:
    """Every path of lre's own that actions must not see (the state
    directory, each filesystem store's content and temporary paths, each
    worker's work directory, the listeners' token and TLS key files); see
    lre/worker/_view.py."""
    paths = [config.global_.state_dir]
    for store in config.stores:
        if store.filesystem is not None:
            content = store.filesystem.content_path
            temp = store.filesystem.temp_path or os.path.join(content, "..", "tmp")
            paths += [content, os.path.normpath(temp)]
    for worker in config.workers:
        if worker.local is not None:
            paths.append(worker.local.work_directory)
    for server in config.servers:  # secrets: shown as /dev/null
        paths.append(server.listener.auth_token_file)
        if server.listener.tls is not None:
            paths.append(server.listener.tls.key_file)
    return tuple(p for p in paths if p)


def state_dir_of(config: Config) -> Path:
    """lre's own state directory for ``config`` (pid file, logs, learned data)."""
    return Path(config.global_.state_dir)


def _simple_of(
    config: Config, name: str
) -> tuple[SimpleSchedulerSpec, str, tuple[PropertyModification, ...]]:
    """Follow property_modifier chains down to a simple scheduler.

    Returns its spec, its name and the modifications collected on the way.
    """
    specs: dict[str, SchedulerSpec] = {s.name: s for s in config.schedulers}
    modifications: list[PropertyModification] = []
    seen: set[str] = set()
    while name not in seen:
        seen.add(name)
        spec = specs[name]
        if spec.simple is not None:
            return spec.simple, name, tuple(modifications)
        if spec.property_modifier is not None:
            modifications.extend(spec.property_modifier.modifications)
            name = spec.property_modifier.scheduler
            continue
        if spec.forward is not None:
            name = spec.forward.local
            continue
        raise AppBuildError(f"schedulers[{name}]: no scheduler kind given")
    raise AppBuildError(f"schedulers[{name}]: property_modifier chain loops")


def _forward_of(config: Config, name: str) -> tuple[str, ForwardSchedulerSpec] | None:
    """The first forward scheduler on the chain from ``name`` (name, spec), if any."""
    specs: dict[str, SchedulerSpec] = {s.name: s for s in config.schedulers}
    seen: set[str] = set()
    while name not in seen:
        seen.add(name)
        spec = specs[name]
        if spec.forward is not None:
            return name, spec.forward
        if spec.property_modifier is None:
            return None
        name = spec.property_modifier.scheduler
    return None


class Application:
    """Everything one lre process runs; see the module docstring."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._stop = trio.Event()
        #: Set once ``serve`` has shut everything down.
        self.stopped = trio.Event()
        self.stores: Stores = build_stores(config)
        #: Each local worker's numbers, "auto" worked out once (by config's rules).
        self.worker_resources: dict[str, WorkerResources] = {
            worker.local.name: worker_resources(worker.local)
            for worker in config.workers
            if worker.local is not None
        }
        self.learner = self._build_learner()
        self.events = EventLog()
        #: Every finished action, in the state dir (None when turned off).
        self.history: HistoryRecorder | None = None
        if config.global_.history.enabled:
            self.history = HistoryRecorder(
                state_dir_of(config),
                max_bytes=int(config.global_.history.max_bytes),
                reserved=self._reserved_now,
            )
        for upstream in self.stores.upstreams:
            upstream.client.health.on_change = self._upstream_changed
        self.schedulers: dict[str, Scheduler] = {}
        self._pressure: dict[str, PressureMonitor] = {}
        self._scheduler_by_simple: dict[str, Scheduler] = {}
        #: Forward schedulers by name (each wraps a local scheduler).
        self.forwarders: dict[str, ForwardScheduler] = {}
        for spec in config.schedulers:
            self._scheduler(spec.name)
        self.workers: list[LocalWorker] = []
        #: One containment backend per mode, shared by the workers using it.
        self.containments: dict[str, Containment] = {}
        containments = self.containments
        for index, worker_spec in enumerate(config.workers):
            local = worker_spec.local
            if local is None:
                continue
            if local.containment not in containments:
                try:
                    containments[local.containment] = choose_containment(local.containment)
                except ContainmentUnavailable as error:
                    raise AppBuildError(
                        f"workers[{index}].local.containment: {local.containment!r} cannot "
                        f"work here: {error}"
                    ) from None
            containment = containments[local.containment]
            if local.network == "block" and not containment.can_block_network:
                raise AppBuildError(
                    f"workers[{index}].local.network: 'block' needs containment 'pidns', "
                    f"this worker has {containment.name!r}"
                )
            filesystem = self.stores.filesystem_of(local.cas_store)
            upload = local.upload_action_result
            self.workers.append(
                LocalWorker(
                    local,
                    resources=self.worker_resources[local.name],
                    scheduler=self._scheduler(local.scheduler),
                    store=self.stores.blob(local.cas_store),
                    directories=self.stores.directories(local.cas_store),
                    action_cache=(
                        self.stores.results(upload.ac_store, local.cas_store)
                        if upload.ac_store and upload.upload_ac_results_strategy != "never"
                        else None
                    ),
                    link_source=filesystem.path_for_link if filesystem is not None else None,
                    adopt=filesystem.adopt_file if filesystem is not None else None,
                    discard=filesystem.discard if filesystem is not None else None,
                    containment=containment,
                    cas_max_bytes=filesystem.max_bytes if filesystem is not None else None,
                    hidden_paths=_lre_directories(config),
                    pressure=self._pressure_of(local),
                )
            )
        self.bridge = TrioBridge()
        self.rpc_metrics = RpcMetrics()
        #: Tells lre's listeners whether a client is one of lre's own actions.
        self.local_peers = LocalPeers(self._action_roots)
        self.health = HealthBoard()
        self.health.add_check("disk", free_space_check(self._existing_parent(), 1 << 30))
        first = next(iter(self.schedulers.values()), None)
        self.assembler = SnapshotAssembler(
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
        self.assembler.containment = self._containment_summary()
        self.assembler.memory_control = self._memory_control_rows
        for worker in self.workers:  # freezes and thaws as events, named by target
            worker.memory.on_event = MemoryEventRecorder(
                self.events, worker.name, self._scheduler(worker.spec.scheduler).statistics
            )
        self._first_scheduler = first
        self.hits: ClientHits | None = None
        self.miss_report = MissReport(self._miss_watches())
        self.assembler.cache_notices = self.miss_report.notices
        self.servers: list[GrpcServer] = []
        for server in config.servers:
            backends: dict[str, InstanceBackends] = {}
            for instance in server.instances:
                backends[instance.instance_name] = InstanceBackends(
                    cas=self.stores.blob(instance.cas_store),
                    action_cache=(
                        self.stores.results(instance.ac_store, instance.cas_store)
                        if instance.ac_store
                        else None
                    ),
                    scheduler=(
                        self._front_scheduler(instance.scheduler) if instance.scheduler else None
                    ),
                    ac_read_only=instance.ac_read_only,
                )
            instances = Instances(backends)
            options = CacheServiceOptions(
                max_batch_total_size_bytes=int(server.max_batch_total_size_bytes)
            )
            servicers = [
                *cache_servicers(self.bridge, instances, options),
                ExecutionServicer(self.bridge, instances),
                OperationsServicer(self.bridge, instances),
            ]
            self.servers.append(
                GrpcServer(
                    ServerOptions.from_listener(
                        server.listener,
                        interceptors=(
                            *auth_interceptors(server.listener),
                            self.rpc_metrics.interceptor(lookup_hits=self._lookup_hits()),
                        ),
                        local_peers=self.local_peers,
                    ),
                    servicers,
                    self.bridge,
                    own_bridge=False,
                    name=server.name,
                )
            )

    def _lookup_hits(self) -> LookupHits | None:
        """GetActionResult hits go to the history too (the scheduler never sees them)."""
        return LookupHits(self.history.record) if self.history is not None else None

    def _reserved_now(self) -> tuple[int, int, int]:
        """Reserved millicpus and memory bytes, and running actions, over all schedulers."""
        millicpus = memory = running = 0
        for scheduler in dict.fromkeys(self.schedulers.values()):
            cpu, mem, run = scheduler.reserved()
            millicpus, memory, running = millicpus + cpu, memory + mem, running + run
        return millicpus, memory, running

    def _existing_parent(self) -> str:
        path = Path(self.config.global_.state_dir)
        while not path.exists() and path != path.parent:
            path = path.parent
        return str(path)

    def _kill_factor(self) -> float:
        locals_ = [w.local for w in self.config.workers if w.local is not None]
        return locals_[0].resources.kill_factor if locals_ else 1.2

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
            for text in missing_protections(worker.containment.name):
                line = f"{worker.name}: {text}"
                if line not in missing:
                    missing.append(line)
        if not self.local_peers.available:
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
            statistics = getattr(store, "statistics", None)
            if callable(statistics):
                out[name] = statistics()
        return out

    def _scheduler(self, name: str) -> Scheduler:
        if name in self.schedulers:
            return self.schedulers[name]
        simple, simple_name, modifications = _simple_of(self.config, name)
        scheduler = self._scheduler_by_simple.get(simple_name)
        if scheduler is None:
            cas_name = simple.cas_store
            if not cas_name:
                raise AppBuildError(f"schedulers[{simple_name}].simple.cas_store: required")
            scheduler = Scheduler(
                simple,
                cas=self.stores.blob(cas_name),
                action_cache=(
                    self.stores.results(simple.ac_store, cas_name) if simple.ac_store else None
                ),
                modifications=modifications,
                resources=self._resource_policy(simple_name),
                advisor=self.learner,
                available_memory=self._live_memory(simple_name),
                memory_frozen=self._memory_frozen(simple_name),
                on_event=self._record_event,
                directories=self.stores.directories(cas_name),
                on_record=self.history.record if self.history is not None else None,
            )
            self._scheduler_by_simple[simple_name] = scheduler
        self.schedulers[name] = scheduler
        return scheduler

    def _front_scheduler(self, name: str) -> ActionScheduler:
        """What clients of scheduler ``name`` talk to: the forward scheduler on
        its chain, else the local scheduler (mypy checks here that both play
        the client role)."""
        local = self._scheduler(name)
        found = _forward_of(self.config, name)
        if found is None:
            return local
        forward_name, spec = found
        forwarder = self.forwarders.get(forward_name)
        if forwarder is not None:
            return forwarder
        simple, _, _ = _simple_of(self.config, name)
        upstream_cas = None
        if spec.upstream_cas_store:
            store = self.stores.blob(spec.upstream_cas_store)
            if not isinstance(store, GrpcStore):
                raise AppBuildError(
                    f"schedulers[{forward_name}].forward.upstream_cas_store: "
                    f"{spec.upstream_cas_store!r} is not a grpc store"
                )
            upstream_cas = store
        local_cas = self.stores.blob(simple.cas_store)
        client = UpstreamClient([spec.endpoint], name=forward_name, headers=spec.headers)
        client.health.on_change = self._upstream_changed
        executor = UpstreamExecutor(
            client,
            instance_name=spec.instance_name,
            local_cas=local_cas,
            upstream_cas=upstream_cas,
            platform=spec.platform,
            directories=self.stores.directories(simple.cas_store),
        )
        forwarder = ForwardScheduler(local, executor, rules=spec.rules)
        self.forwarders[forward_name] = forwarder
        return forwarder

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

    def _local_worker(self, scheduler_name: str) -> LocalWorkerSpec | None:
        """The (first) local worker pulling from the simple scheduler."""
        for worker in self.config.workers:
            local = worker.local
            if local is not None and _simple_of(self.config, local.scheduler)[1] == scheduler_name:
                return local
        return None

    def _resource_policy(self, scheduler_name: str) -> ResourcePolicy:
        """Cold memory and ladder of the worker pulling from the scheduler."""
        local = self._local_worker(scheduler_name)
        if local is None:
            return ResourcePolicy()
        res = local.resources
        return ResourcePolicy(
            cold_memory_bytes=int(res.cold_memory),
            ladder=tuple(int(step) for step in res.ladder),
            max_steps=res.max_steps,
        )

    def _live_memory(self, scheduler_name: str) -> Callable[[], int] | None:
        """Memory new actions may take (0 while memory is short), when the
        worker asks for the live veto."""
        local = self._local_worker(scheduler_name)
        if local is None or not local.resources.live_memory_veto:
            return None
        return self._pressure_of(local).room_bytes

    def _memory_frozen(self, scheduler_name: str) -> Callable[[], bool] | None:
        """Whether the live veto holds starts because the memory control keeps
        actions frozen (the queue then says ``frozen``), with ``_live_memory``."""
        local = self._local_worker(scheduler_name)
        if local is None or not local.resources.live_memory_veto:
            return None
        pressure = self._pressure_of(local)
        return lambda: pressure.frozen > 0

    def _memory_control_rows(self) -> tuple[MemoryControlRow, ...]:
        """Each local worker's memory control (``ProcessSnapshot.memory_control``)."""
        rows = []
        for worker in self.workers:
            stats = worker.memory.statistics()
            rows.append(
                MemoryControlRow(
                    worker=worker.name,
                    frozen_now=stats.frozen_now,
                    frozen=stats.frozen,
                    thawed=stats.thawed,
                    killed=stats.killed,
                    short_reason=stats.short_reason,
                    available_bytes=stats.available_bytes,
                    pressure_full_avg10=stats.pressure_full_avg10,
                    frozen_leases=stats.frozen_ids,
                    sampling=stats.sampling,
                    pressure_events=stats.pressure_events,
                )
            )
        return tuple(rows)

    def _pressure_of(self, local: LocalWorkerSpec) -> PressureMonitor:
        """The host memory readings of ``local``, shared by its worker's memory
        control and its scheduler's admission (made on first use)."""
        monitor = self._pressure.get(local.name)
        if monitor is None:
            monitor = self._pressure[local.name] = PressureMonitor(
                int(local.resources.memory_headroom)
            )
        return monitor

    def _build_learner(self) -> ReservationLearner | None:
        """One learned-reservation store per process, in the state directory.

        Uses the learner settings of the first local worker; None when it
        turns learning off (or there is no local worker).
        """
        locals_ = [w.local for w in self.config.workers if w.local is not None]
        if not locals_ or not locals_[0].resources.learner.enabled:
            return None
        res = locals_[0].resources
        return ReservationLearner.in_state_dir(
            str(state_dir_of(self.config)), res.learner, cold_memory_bytes=int(res.cold_memory)
        )

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
            log.warning("running as root: actions run as root too; start lre as your own user")
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
                cache = self.stores.action_caches.get(instance.ac_store or "")
                if isinstance(cache, FastSlowActionCache) and instance.ac_store not in watches:
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
            blob_stores={
                name: store
                for name, store in self.stores.blobs.items()
                if isinstance(store, FilesystemStore)
            },
            action_caches={
                name: cache
                for name, cache in self.stores.action_caches.items()
                if isinstance(cache, FilesystemActionCache)
            },
            zero_hits=self._zero_hits,
        )

    def request_stop(self) -> None:
        """Begin the ordered shutdown of ``serve`` (safe to call repeatedly)."""
        self._stop.set()
