"""``LocalWorker``: the loop that leases actions from the scheduler and runs them.

Lifecycle (``run``, started with ``nursery.start``):

1. lock and empty the work directory ``{work_directory}/{name}/`` (raises
   ``WorkDirectoryInUse`` naming the holder's pid before ``started()``);
2. resolve platform properties (``query_cmd`` run once) and register with
   the scheduler: properties, capacity (CPUs x overcommit in millicpus and
   the memory budget, numbers config worked out: ``WorkerResources``),
   ``max_inflight``, timeouts;
3. start the sampler (after each pass the memory control freezes, thaws or
   kills actions when memory is short: ``_memory_control``), the PSI trigger
   that makes the sampler pass at once on a memory stall where the kernel
   lets lre register one (``_psi_trigger``; else the timer alone) and the
   action-directory janitor (``ActionDirectories``:
   directories made ahead, recycled and removed in batches off the loop);
4. loop: ``lease`` -> precondition script -> run the action in its own task
   (one cancel scope per action, tied to the lease's cancellation) ->
   ``report``. When the precondition script says no, the lease is reported
   as ``Backpressure`` and the worker pauses until one of its running
   actions completes, or, when idle, for a growing backoff (0.25 s .. 5 s).

Cancelling ``run`` (shutdown) cancels every running action: each process
group gets SIGTERM, then SIGKILL after ``kill_grace_s``, and is reaped; the
leases are reported as infrastructure failures, the worker is unregistered
and the directory lock released.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from lre.cas import BlobStore, DirectoryReader
from lre.config import LocalWorkerSpec, WorkerResources
from lre.errors import LreError, Unavailable
from lre.scheduler import (
    Backpressure,
    InfrastructureFailure,
    Lease,
    Outcome,
    Reservation,
    WorkerInfo,
    WorkerScheduler,
)
from lre.snapshot import MemoryControlRow
from lre.worker._action import ActionResultWriter, ActionRunner, RunnerContext
from lre.worker._precondition import precondition_allows
from lre.worker._properties import resolve_properties
from lre.worker.containment import ActionIdentity, Containment, choose_containment
from lre.worker.directories import WorkDirectory
from lre.worker.inputs import InputJournal, recover_linked_inputs
from lre.worker.memory import (
    ControlPace,
    GovernorLimits,
    MemoryCeiling,
    MemoryControl,
    MemoryGovernor,
    PressureMonitor,
    PsiTrigger,
    cgroup_freezer,
)
from lre.worker.outputs import ActionLimits
from lre.worker.usage import ActionUsage, ProcessTreeSampler

log = logging.getLogger(__name__)

BACKOFF_START_S = 0.25
BACKOFF_MAX_S = 5.0
HEARTBEAT_S = 5.0

#: Memory capacity offered when ``memory_budget`` is 0 ("no budget").
UNLIMITED_MEMORY = 1 << 60


@dataclass(frozen=True, slots=True)
class LocalWorkerStatistics:
    """The local worker's own counters: actions running now, completed and
    turned back by the precondition script, and its running actions' usage."""

    name: str
    running: int
    completed: int
    backpressured: int
    draining: bool
    usage: tuple[ActionUsage, ...]
    memory: MemoryControlRow | None = None


@dataclass(frozen=True, slots=True)
class WorkerHost:
    """What the composition root worked out for a worker from this host and
    the whole config; each field left at its default is the worker's own."""

    #: How action processes are contained, shared by the workers of one
    #: mode (None: the spec's mode).
    containment: Containment | None = None
    #: The user actions run as (None: lre's own; ``_identity.py``).
    identity: ActionIdentity | None = None
    #: lre's directories hidden from every action's view (``_view.py``).
    hidden_paths: tuple[str, ...] = ()


class LocalWorker:
    """One local worker; see the module docstring.

    - ``resources``: the numbers of ``spec`` with ``"auto"`` worked out
      (``lre.config.worker_resources``).
    - ``store``: the CAS inputs are read from and outputs written to; where
      its blobs are files here (``capabilities().local_files``) inputs are
      hardlinked, outputs moved in, altered inputs discarded, and its
      ``max_bytes`` sets ``limits.max_output_bytes`` "auto" (``ActionLimits.of``).
    - ``action_cache``: written per ``upload_action_result``.
    - ``pressure``: the host memory readings (with the worker's
      ``memory_headroom``), shared with the scheduler's admission
      (``PressureMonitor.room_bytes``); the composition root builds it.
    - ``directories``: the reader of ``store``'s Directory messages, shared
      with the scheduler by the composition root (None: one of its own).
    - ``host``: containment, action user and hidden paths (``WorkerHost``).
    """

    def __init__(
        self,
        spec: LocalWorkerSpec,
        *,
        resources: WorkerResources,
        scheduler: WorkerScheduler,
        store: BlobStore,
        pressure: PressureMonitor,
        action_cache: ActionResultWriter | None = None,
        directories: DirectoryReader | None = None,
        host: WorkerHost | None = None,
    ) -> None:
        host = host if host is not None else WorkerHost()
        self.spec = spec
        #: The user actions run as (None: lre's own; ``_identity.py``).
        self.identity = host.identity
        files = store.capabilities().local_files
        #: The limits of ``spec.limits``, "auto" worked out from the bound of
        #: the worker's CAS (unknown unless its blobs are files here).
        self.limits = ActionLimits.of(spec.limits, files.max_bytes if files is not None else None)
        self.resources = resources
        self.hidden_paths = host.hidden_paths
        self.directories = directories if directories is not None else DirectoryReader(store)
        #: How action processes are contained (default: the spec's mode).
        self.containment = host.containment or choose_containment(spec.containment)
        self.scheduler = scheduler
        self.store = store
        self.action_cache = action_cache
        self.sampler = ProcessTreeSampler(
            float(spec.resources.sample_interval), on_over_limit=self._over_limit
        )
        res = spec.resources
        self.pressure = pressure
        #: RSS above which an action is killed and fails: the top step (the
        #: whole worker's budget, else the last step of its scheduler's
        #: ladder) x its scheduler's kill_factor.
        self.ceiling = MemoryCeiling(
            resources.top_step_bytes, bool(resources.memory_budget_bytes), resources.kill_factor
        )
        self.memory = MemoryControl(
            MemoryGovernor(governor_limits(spec, resources, self.ceiling.ceiling_bytes, pressure)),
            self.pressure,
            self.sampler,
            self.containment,
            kill=self._memory_kill,
            pace=ControlPace(float(res.sample_interval), float(res.pressure_sample_interval)),
            freezer=cgroup_freezer(),
            worker=spec.name,
        )
        self.sampler.on_pass = self.memory.after_pass
        #: Wakes the memory control on a kernel memory stall event.
        self.pressure_trigger = PsiTrigger(self.memory.pressure_event)
        self.memory.trigger = self.pressure_trigger
        self.runner: ActionRunner | None = None
        self.workdir: WorkDirectory | None = None
        self.info: WorkerInfo | None = None
        self._running = 0
        self._completed = 0
        self._backpressured = 0
        self._draining = False
        self._finished = trio.Event()
        self._idle = trio.Event()
        self._idle.set()

    @property
    def name(self) -> str:
        return self.spec.name

    def _over_limit(self, usage: ActionUsage) -> None:
        if self.runner is not None:
            self.runner.over_limit(usage)

    def _memory_kill(self, action_id: str, reason: str, final: bool) -> None:
        if self.runner is not None:
            self.runner.memory_kill(action_id, reason, final)

    async def describe(self) -> WorkerInfo:
        """What this worker offers (runs the ``query_cmd`` of its properties).

        Raises ``FailedPrecondition`` naming a property whose query fails.
        """
        resources = self.resources
        capacity = Reservation(
            millicpus=int(resources.cpu_count * 1000 * self.spec.resources.cpu_overcommit),
            memory_bytes=resources.memory_budget_bytes or UNLIMITED_MEMORY,
        )
        properties = await resolve_properties(self.spec.platform_properties)
        return WorkerInfo(
            name=self.spec.name,
            properties=properties,
            capacity=capacity,
            max_inflight=resources.max_inflight_tasks,
            max_action_timeout_s=float(self.spec.max_action_timeout_s),
            default_timeout_s=float(self.spec.default_timeout_s),
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled (see the module docstring)."""
        workdir = await trio.to_thread.run_sync(
            WorkDirectory.open, self.spec.work_directory, self.spec.name
        )
        self.workdir = workdir
        journal: InputJournal | None = None
        try:
            files = self.store.capabilities().local_files
            if files is not None:
                # Before this worker takes work, so before lre serves anything.
                await recover_linked_inputs(workdir.journal_path, files.discard)
                journal = InputJournal(workdir.journal_path)
            self.info = await self.describe()
            self.runner = ActionRunner(
                RunnerContext(
                    self.spec,
                    workdir,
                    self.store,
                    max_inflight=self.resources.max_inflight_tasks,
                    action_cache=self.action_cache,
                    sampler=self.sampler,
                    containment=self.containment,
                    journal=journal,
                    directories=self.directories,
                    limits=self.limits,
                    hidden_paths=self.hidden_paths,
                    memory=self.memory,
                    ceiling=self.ceiling,
                    identity=self.identity,
                    tmpfs_bytes=self.resources.sandbox_tmpfs_bytes,
                )
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(self.sampler.run)
                await nursery.start(self.pressure_trigger.run)
                await nursery.start(self.runner.parts.directories.run)
                nursery.start_soon(self._heartbeat)
                self.scheduler.register_worker(self.info)
                try:
                    task_status.started()
                    await self._loop(nursery)
                finally:
                    nursery.cancel_scope.cancel()
                    self.memory.thaw_all()  # a stopped process does not end on SIGTERM
                    with trio.CancelScope(shield=True):
                        await self._idle.wait()
                    self.scheduler.unregister_worker(self.spec.name)
        finally:
            self.sampler.close()
            if self.runner is not None:
                self.runner.close()
            if journal is not None:
                journal.close()
            workdir.close()

    def set_draining(self, draining: bool = True) -> None:
        """Stop (or resume) taking new actions; running ones finish."""
        self._draining = draining
        self.scheduler.set_draining(self.spec.name, draining)

    async def wait_idle(self) -> None:
        """Return once no action of this worker is running."""
        await self._idle.wait()

    def statistics(self) -> LocalWorkerStatistics:
        return LocalWorkerStatistics(
            name=self.spec.name,
            running=self._running,
            completed=self._completed,
            backpressured=self._backpressured,
            draining=self._draining,
            usage=self.sampler.snapshots(),
            memory=self.memory.statistics(),
        )

    def jobserver_tokens(self) -> tuple[int, int]:
        """``(in_use, total)`` jobserver tokens over the running actions' pools.

        ``total`` is what the pools were filled with, ``in_use`` what clients
        hold now; (0, 0) when nothing runs or the jobserver is disabled.
        """
        return self.runner.jobserver_tokens() if self.runner is not None else (0, 0)

    async def _heartbeat(self) -> None:
        while True:
            self.scheduler.heartbeat(self.spec.name)
            await trio.sleep(HEARTBEAT_S)

    async def _loop(self, nursery: trio.Nursery) -> None:
        backoff = BACKOFF_START_S
        while True:
            try:
                lease = await self.scheduler.lease(self.spec.name)
            except Unavailable:
                return
            if self.spec.precondition_script and not await precondition_allows(
                self.spec.precondition_script
            ):
                self._backpressured += 1
                self.scheduler.report(
                    lease.lease_id, Backpressure("worker precondition script said no")
                )
                if self._running:
                    await self._finished.wait()
                else:
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            backoff = BACKOFF_START_S
            self._running += 1
            self._idle = trio.Event() if self._idle.is_set() else self._idle
            nursery.start_soon(self._run_one, lease, name=f"action {lease.operation_name}")

    async def _run_one(self, lease: Lease) -> None:
        assert self.runner is not None
        outcome: Outcome = InfrastructureFailure(
            Unavailable(f"worker {self.spec.name} is shutting down")
        )
        try:
            outcome = await self.runner.run(lease)
        except LreError as error:  # e.g. the action directory could not be made
            outcome = InfrastructureFailure(error)
        except OSError as error:
            log.exception("worker %s: %s failed", self.spec.name, lease.operation_name)
            outcome = InfrastructureFailure(
                Unavailable(f"worker {self.spec.name}: {error.strerror or error}")
            )
        finally:
            self.scheduler.report(lease.lease_id, outcome)
            self._running -= 1
            self._completed += 1
            finished, self._finished = self._finished, trio.Event()
            finished.set()
            if self._running == 0:
                self._idle.set()


def governor_limits(
    spec: LocalWorkerSpec,
    resources: WorkerResources,
    ceiling_bytes: int,
    pressure: PressureMonitor,
) -> GovernorLimits:
    """The memory policy's thresholds from the worker's config (the headroom
    is the one ``pressure`` reads the host with)."""
    res = spec.resources
    return GovernorLimits(
        headroom_bytes=pressure.headroom_bytes,
        floor_bytes=int(res.memory_hard_floor),
        ceiling_bytes=ceiling_bytes,
        budget_bytes=resources.memory_budget_bytes,
        budget_share=res.budget_short_share,
        pressure_threshold=res.pressure_threshold,
        max_frozen_s=float(res.max_frozen),
        thaw_interval_s=float(res.thaw_interval),
    )
