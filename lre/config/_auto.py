"""Values written as ``"auto"``, worked out from the machine.

The rules are small pure functions of measured facts (``HostFacts``), so they
are easy to test and to document; ``resolve`` applies them to a config, and
``worker_resources`` gives a local worker its numbers (``WorkerResources``)
by the same rules; no other package works an ``"auto"`` out:

- filesystem store ``max_bytes``: 25% of the free disk space at the nearest
  existing parent of ``content_path``, at most 50 GiB, at least 64 MiB;
- memory store ``max_bytes``: 1 GiB;
- worker ``cpu_count``: the CPUs this process may run on
  (``os.sched_getaffinity``, else ``os.cpu_count()``);
- worker ``max_inflight_tasks``: the whole CPUs of the worker's capacity,
  ``floor(cpu_count x cpu_overcommit)``, at least 1;
- worker ``memory_budget``: 75% of physical RAM minus ``memory_floor``, at
  least 1 GiB;
- worker ``limits.max_output_bytes``: half the ``max_bytes`` of the worker's
  CAS (the fast tier of a fast_slow store), so one action cannot evict the
  whole cache; 16 GiB when that store is not in the config;
- worker ``sandbox_tmpfs_size``: the hard ceiling (the top ladder step, the
  memory budget else the last entry of its scheduler's ladder, x its
  scheduler's ``kill_factor``), half of RAM when there is none.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass

from lre.config._model_fields import ByteSize
from lre.config._models import Config
from lre.config._scheduler_models import SchedulerResourceSpec
from lre.config._store_models import EvictionPolicy, StoreSpec
from lre.config._worker_models import LocalWorkerSpec, WorkerSpec

GIB = 1 << 30
MIB = 1 << 20

FILESYSTEM_SHARE_OF_FREE_DISK = 0.25
FILESYSTEM_MAX_BYTES_CAP = 50 * GIB
FILESYSTEM_MAX_BYTES_FLOOR = 64 * MIB
MEMORY_STORE_MAX_BYTES = 1 * GIB
MEMORY_BUDGET_SHARE_OF_RAM = 0.75
MEMORY_BUDGET_FLOOR = 1 * GIB
OUTPUT_SHARE_OF_CAS = 0.5
OUTPUT_FALLBACK = 16 * GIB


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What the ``"auto"`` rules need to know about the machine."""

    cpu_count: int
    total_memory: int
    free_disk: Callable[[str], int]
    """Free bytes on the filesystem holding a path (that may not exist yet)."""

    @classmethod
    def probe(cls) -> HostFacts:
        """Measure this machine (CPU affinity, RAM via ``sysconf``, disk via ``shutil``)."""
        affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        return cls(
            cpu_count=auto_cpu_count(affinity, os.cpu_count()),
            total_memory=physical_memory(),
            free_disk=free_disk_at,
        )


def physical_memory() -> int:
    """Bytes of RAM in the machine (``sysconf``; Linux and macOS)."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def auto_cpu_count(affinity: int | None, os_count: int | None) -> int:
    """CPUs to use: the affinity mask's size if known, else the CPU count, else 1."""
    return max(1, affinity or os_count or 1)


def auto_filesystem_max_bytes(free_bytes: int) -> int:
    """A filesystem store's cap: 25% of ``free_bytes``, within [64 MiB, 50 GiB],
    rounded down to 64 MiB (so that the value, and what is worked out from it,
    does not change with every file written between two starts)."""
    share = int(free_bytes * FILESYSTEM_SHARE_OF_FREE_DISK) // (64 << 20) * (64 << 20)
    return max(FILESYSTEM_MAX_BYTES_FLOOR, min(FILESYSTEM_MAX_BYTES_CAP, share))


def auto_memory_budget(total_memory: int, memory_floor: int) -> int:
    """Memory actions may reserve: 75% of RAM minus ``memory_floor``, at least
    1 GiB, rounded down to a MiB (so that ``lre config show`` prints it as one)."""
    budget = (int(total_memory * MEMORY_BUDGET_SHARE_OF_RAM) - memory_floor) >> 20 << 20
    return max(MEMORY_BUDGET_FLOOR, budget)


def auto_max_inflight_tasks(cpu_count: int, cpu_overcommit: float = 1.0) -> int:
    """Actions a worker runs at once: one per whole CPU of its capacity
    (``cpu_count x cpu_overcommit``, rounded down), at least one, so that the
    overcommit is reachable by one-CPU actions."""
    return max(1, math.floor(cpu_count * cpu_overcommit + 1e-9))


def nearest_existing_dir(path: str) -> str:
    """``path`` or its nearest parent that exists (``"."``-relative paths too)."""
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def free_disk_at(path: str) -> int:
    """Free bytes on the filesystem that will hold ``path``."""
    return shutil.disk_usage(nearest_existing_dir(path)).free


def resolve(config: Config, host: HostFacts | None = None) -> Config:
    """A copy of ``config`` with every ``"auto"`` replaced by its value for
    ``host`` (``HostFacts.probe()`` when None). Raises ``OSError`` only if the
    machine cannot be measured (e.g. no parent of a content_path is readable)."""
    facts = host if host is not None else HostFacts.probe()
    stores = tuple(_resolve_store(store, facts) for store in config.stores)
    by_name = {store.name: store for store in stores}
    return dataclasses.replace(
        config,
        stores=stores,
        workers=tuple(_resolve_worker(worker, facts, by_name, config) for worker in config.workers),
    )


def auto_max_output_bytes(cas_max_bytes: int | None) -> int:
    """``limits.max_output_bytes`` "auto" for a worker whose CAS holds
    ``cas_max_bytes`` (None: unknown)."""
    if not cas_max_bytes:
        return OUTPUT_FALLBACK
    return max(1, int(cas_max_bytes * OUTPUT_SHARE_OF_CAS))


def _store_max_bytes(name: str, stores: dict[str, StoreSpec]) -> int | None:
    store = stores.get(name)
    if store is not None and store.fast_slow is not None:
        store = stores.get(store.fast_slow.fast)
    if store is None:
        return None
    spec = store.filesystem or store.memory
    if spec is None or spec.eviction_policy.max_bytes == "auto":
        return None
    return int(spec.eviction_policy.max_bytes)


def _resolve_store(store: StoreSpec, facts: HostFacts) -> StoreSpec:
    if store.memory is not None and store.memory.eviction_policy.max_bytes == "auto":
        policy = _with_max_bytes(store.memory.eviction_policy, MEMORY_STORE_MAX_BYTES)
        memory = dataclasses.replace(store.memory, eviction_policy=policy)
        return dataclasses.replace(store, memory=memory)
    if store.filesystem is not None and store.filesystem.eviction_policy.max_bytes == "auto":
        free = facts.free_disk(store.filesystem.content_path)
        policy = _with_max_bytes(store.filesystem.eviction_policy, auto_filesystem_max_bytes(free))
        filesystem = dataclasses.replace(store.filesystem, eviction_policy=policy)
        return dataclasses.replace(store, filesystem=filesystem)
    return store


def _with_max_bytes(policy: EvictionPolicy, max_bytes: int) -> EvictionPolicy:
    return dataclasses.replace(policy, max_bytes=ByteSize(max_bytes))


@dataclass(frozen=True, slots=True)
class WorkerResources:
    """A local worker's numbers with every ``"auto"`` worked out (plain data).

    - ``cpu_count``: CPUs offered (capacity is this x ``cpu_overcommit``);
    - ``memory_budget_bytes``: memory all its actions may reserve together,
      0 = no budget;
    - ``max_inflight_tasks``: actions at once at most, 0 = unlimited;
    - ``sandbox_tmpfs_bytes``: the size of an action's private /tmp and
      /dev/shm together (``auto_sandbox_tmpfs_bytes``; 0 = the view's own
      default, half of RAM, for callers that build this by hand);
    - ``top_step_bytes`` and ``kill_factor``: the hard ceiling is their
      product; the top step is the memory budget, else the last entry of the
      ladder of the worker's scheduler (``SchedulerResourceSpec``).
    """

    cpu_count: int
    memory_budget_bytes: int
    max_inflight_tasks: int
    sandbox_tmpfs_bytes: int = 0
    top_step_bytes: int = 0
    kill_factor: float = 1.2


def worker_resources(
    local: LocalWorkerSpec,
    host: HostFacts | None = None,
    *,
    scheduler: SchedulerResourceSpec | None = None,
) -> WorkerResources:
    """The numbers of ``local``: its own, or the ``"auto"`` rules' for ``host``
    (``HostFacts.probe()`` when None) under ``scheduler``, the resources of the
    simple scheduler it takes actions from (defaults when None). Raises
    ``OSError`` only if the machine cannot be measured."""
    scheduler = scheduler if scheduler is not None else SchedulerResourceSpec()
    ladder, kill_factor = scheduler.ladder, scheduler.kill_factor
    facts = host if host is not None else HostFacts.probe()
    resources = local.resources
    cpu_count = resources.cpu_count if resources.cpu_count != "auto" else facts.cpu_count
    memory_budget = resources.memory_budget
    if memory_budget == "auto":
        memory_budget = ByteSize(auto_memory_budget(facts.total_memory, resources.memory_floor))
    inflight = local.max_inflight_tasks
    if inflight == "auto":
        inflight = auto_max_inflight_tasks(cpu_count, resources.cpu_overcommit)
    top = int(memory_budget) or (int(ladder[-1]) if ladder else 0)
    tmpfs = local.sandbox_tmpfs_size
    if tmpfs == "auto":
        tmpfs = ByteSize(auto_sandbox_tmpfs_bytes(int(top * kill_factor), facts.total_memory))
    return WorkerResources(
        cpu_count=cpu_count,
        memory_budget_bytes=int(memory_budget),
        max_inflight_tasks=inflight,
        sandbox_tmpfs_bytes=int(tmpfs),
        top_step_bytes=top,
        kill_factor=kill_factor,
    )


def scheduler_resources(config: Config, name: str) -> SchedulerResourceSpec | None:
    """The resources of scheduler ``name`` when it is a simple one (what a
    worker of that scheduler runs under), else None."""
    for spec in config.schedulers:
        if spec.name == name and spec.simple is not None:
            return spec.simple.resources
    return None


def auto_sandbox_tmpfs_bytes(ceiling_bytes: int, total_memory: int) -> int:
    """``sandbox_tmpfs_size`` auto: the hard ceiling (what an action may hold
    before it is killed anyway; its tmpfs counts as its memory), or half of
    RAM without one."""
    return ceiling_bytes if ceiling_bytes > 0 else total_memory // 2


def _resolve_worker(
    worker: WorkerSpec, facts: HostFacts, stores: dict[str, StoreSpec], config: Config
) -> WorkerSpec:
    local = worker.local
    if local is None:
        return worker
    numbers = worker_resources(local, facts, scheduler=scheduler_resources(config, local.scheduler))
    resources = dataclasses.replace(
        local.resources,
        cpu_count=numbers.cpu_count,
        memory_budget=ByteSize(numbers.memory_budget_bytes),
    )
    limits = local.limits
    if limits.max_output_bytes == "auto":
        cas_bytes = _store_max_bytes(local.cas_store, stores)
        limits = dataclasses.replace(
            limits, max_output_bytes=ByteSize(auto_max_output_bytes(cas_bytes))
        )
    local = dataclasses.replace(
        local,
        resources=resources,
        max_inflight_tasks=numbers.max_inflight_tasks,
        limits=limits,
        sandbox_tmpfs_size=ByteSize(numbers.sandbox_tmpfs_bytes),
    )
    return dataclasses.replace(worker, local=local)
