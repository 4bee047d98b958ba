"""The "auto" rules, resolve() and worker_resources()."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from lre.config import (
    ByteSize,
    HostFacts,
    SchedulerResourceSpec,
    WorkerResources,
    nearest_existing_dir,
    resolve,
    worker_resources,
)
from lre.config._auto import (
    auto_cpu_count,
    auto_filesystem_max_bytes,
    auto_max_inflight_tasks,
    auto_memory_budget,
)

from .conftest import MINIMAL, load

GIB = 1 << 30


def test_cpu_count_prefers_affinity() -> None:
    assert auto_cpu_count(4, 16) == 4
    assert auto_cpu_count(None, 16) == 16
    assert auto_cpu_count(None, None) == 1


def test_filesystem_max_bytes_is_a_quarter_of_free_disk_capped() -> None:
    assert auto_filesystem_max_bytes(100 * GIB) == 25 * GIB
    assert auto_filesystem_max_bytes(1000 * GIB) == 50 * GIB
    assert auto_filesystem_max_bytes(0) == 64 << 20


def test_memory_budget() -> None:
    assert auto_memory_budget(16 * GIB, 2 * GIB) == 10 * GIB
    assert auto_memory_budget(2 * GIB, 2 * GIB) == 1 * GIB  # never below 1 GiB


def test_max_inflight_tasks_is_whole_cpus_of_capacity() -> None:
    assert auto_max_inflight_tasks(8) == 8
    assert auto_max_inflight_tasks(2, 1.5) == 3
    assert auto_max_inflight_tasks(2, 1.25) == 2  # 2.5 CPUs: two whole ones
    assert auto_max_inflight_tasks(3, 1.5) == 4
    assert auto_max_inflight_tasks(10, 1.1) == 11  # no float rounding down to 10
    assert auto_max_inflight_tasks(1, 0.5) == 1  # never zero (0 would mean unlimited)


def test_nearest_existing_dir(tmp_path: Path) -> None:
    assert nearest_existing_dir(str(tmp_path / "a" / "b" / "c")) == str(tmp_path)
    assert nearest_existing_dir(str(tmp_path)) == str(tmp_path)


def test_host_facts_probe_measures_this_machine() -> None:
    facts = HostFacts.probe()
    assert 1 <= facts.cpu_count <= (os.cpu_count() or 1)
    assert facts.total_memory > 64 << 20
    assert facts.free_disk("/definitely/not/here") > 0


def test_resolve_replaces_every_auto(tmp_path: Path) -> None:
    seen: list[str] = []

    def free_disk(path: str) -> int:
        seen.append(path)
        return 40 * GIB

    text = MINIMAL.replace(
        'work_directory: "/data/work"',
        'work_directory: "/data/work", resources: { memory_floor: "1GiB" }',
    )
    config = load(text)
    resolved = resolve(config, HostFacts(cpu_count=6, total_memory=16 * GIB, free_disk=free_disk))
    filesystem = resolved.stores[0].filesystem
    memory = resolved.stores[1].memory
    local = resolved.workers[0].local
    assert filesystem is not None and memory is not None and local is not None
    assert filesystem.eviction_policy.max_bytes == 10 * GIB
    assert seen == ["/data/cas"]
    assert memory.eviction_policy.max_bytes == 1 * GIB
    assert local.resources.cpu_count == 6
    assert local.max_inflight_tasks == 9  # 6 CPUs x the default overcommit 1.5
    assert local.resources.memory_budget == 11 * GIB
    # the input is untouched (frozen models, a copy comes back)
    assert config.workers[0].local is not None
    assert config.workers[0].local.max_inflight_tasks == "auto"


def test_resolve_keeps_explicit_values_and_uses_worker_cpus() -> None:
    text = MINIMAL.replace(
        'work_directory: "/data/work"',
        'work_directory: "/data/work", resources: { cpu_count: 3, memory_budget: "5GiB" }',
    )
    resolved = resolve(load(text), HostFacts(cpu_count=64, total_memory=GIB, free_disk=lambda p: 0))
    local = resolved.workers[0].local
    assert local is not None
    assert local.resources.cpu_count == 3
    assert local.max_inflight_tasks == 4  # floor(3 x 1.5)
    assert local.resources.memory_budget == 5 * GIB


def test_worker_resources_are_the_numbers_resolve_writes() -> None:
    """A worker's numbers come from the same rules as ``resolve``, and a
    resolved config keeps them whatever machine reads it again."""
    facts = HostFacts(cpu_count=6, total_memory=16 * GIB, free_disk=lambda p: 0)
    config = load(MINIMAL)
    local = config.workers[0].local
    assert local is not None
    numbers = worker_resources(local, facts)
    assert numbers == WorkerResources(
        cpu_count=6,
        memory_budget_bytes=10 * GIB,
        max_inflight_tasks=9,
        # the hard ceiling: the budget x kill_factor 1.2
        sandbox_tmpfs_bytes=int(10 * GIB * 1.2),
        top_step_bytes=10 * GIB,
        kill_factor=1.2,
    )
    resolved = resolve(config, facts).workers[0].local
    assert resolved is not None
    elsewhere = HostFacts(cpu_count=64, total_memory=GIB, free_disk=lambda p: 0)
    assert worker_resources(resolved, elsewhere) == numbers
    # small machines: the budget never goes below 1 GiB
    small = HostFacts(cpu_count=1, total_memory=2 * GIB, free_disk=lambda p: 0)
    assert worker_resources(local, small).memory_budget_bytes == GIB


def test_worker_resources_keep_explicit_values_and_no_budget() -> None:
    text = MINIMAL.replace(
        'work_directory: "/data/work"',
        'work_directory: "/data/work", max_inflight_tasks: 0, '
        "resources: { cpu_count: 3, memory_budget: 0 }",
    )
    local = load(text).workers[0].local
    assert local is not None
    numbers = worker_resources(
        local, HostFacts(cpu_count=64, total_memory=GIB, free_disk=lambda p: 0)
    )
    # no budget: the ceiling is the last ladder step (8 GiB) x kill_factor 1.2
    assert numbers == WorkerResources(
        cpu_count=3,
        memory_budget_bytes=0,
        max_inflight_tasks=0,
        sandbox_tmpfs_bytes=int(8 * GIB * 1.2),
        top_step_bytes=8 * GIB,
        kill_factor=1.2,
    )
    # the ladder and kill_factor are those of the worker's scheduler
    own = worker_resources(
        local,
        HostFacts(cpu_count=64, total_memory=GIB, free_disk=lambda p: 0),
        scheduler=SchedulerResourceSpec(ladder=(ByteSize(GIB), ByteSize(2 * GIB)), kill_factor=2),
    )
    assert (own.top_step_bytes, own.kill_factor) == (2 * GIB, 2)
    assert own.sandbox_tmpfs_bytes == 4 * GIB
    half = worker_resources(
        local,
        HostFacts(cpu_count=64, total_memory=GIB, free_disk=lambda p: 0),
        scheduler=SchedulerResourceSpec(ladder=()),
    )
    assert half.sandbox_tmpfs_bytes == GIB // 2  # neither: half of RAM
    explicit = worker_resources(
        replace(local, sandbox_tmpfs_size=ByteSize(64 << 20)),
        HostFacts(cpu_count=64, total_memory=GIB, free_disk=lambda p: 0),
    )
    assert explicit.sandbox_tmpfs_bytes == 64 << 20


def test_resolve_sizes_a_worker_by_its_schedulers_ladder() -> None:
    text = MINIMAL.replace(
        'simple: { ac_store: "ac", cas_store: "cas" }',
        'simple: { ac_store: "ac", cas_store: "cas", '
        'resources: { ladder: ["1GiB", "3GiB"], kill_factor: 2 } }',
    ).replace(
        'work_directory: "/data/work"',
        'work_directory: "/data/work", resources: { memory_budget: 0 }',
    )
    facts = HostFacts(cpu_count=4, total_memory=64 * GIB, free_disk=lambda p: 0)
    local = resolve(load(text), facts).workers[0].local
    assert local is not None
    assert local.sandbox_tmpfs_size == 6 * GIB  # the scheduler's top step x its kill_factor


def test_worker_resources_measure_this_machine_as_resolve_does() -> None:
    local = load(MINIMAL).workers[0].local
    assert local is not None
    measured = worker_resources(local)
    resolved = resolve(load(MINIMAL)).workers[0].local
    assert resolved is not None
    assert measured == worker_resources(resolved)
    assert measured.cpu_count >= 1 and measured.memory_budget_bytes >= GIB


def _max_output_bytes(text: str, free_disk: int) -> object:
    facts = HostFacts(cpu_count=2, total_memory=8 * GIB, free_disk=lambda path: free_disk)
    local = resolve(load(text), facts).workers[0].local
    assert local is not None
    return local.limits.max_output_bytes


def test_max_output_bytes_is_half_the_cas_and_far_below_a_terabyte_by_default() -> None:
    # One action cannot evict more than half the cache, and a 1 TiB
    # sparse output is refused under the defaults on any disk (the auto CAS
    # is capped at 50 GiB).
    assert _max_output_bytes(MINIMAL, 40 * GIB) == 5 * GIB
    assert _max_output_bytes(MINIMAL, 1 << 50) == 25 * GIB
    explicit_cas = MINIMAL.replace(
        '{ content_path: "/data/cas" }',
        '{ content_path: "/data/cas", eviction_policy: { max_bytes: "8GiB" } }',
    )
    assert _max_output_bytes(explicit_cas, 1 << 50) == 4 * GIB
    explicit = MINIMAL.replace(
        'work_directory: "/data/work"',
        'work_directory: "/data/work", limits: { max_output_bytes: "3GiB" }',
    )
    assert _max_output_bytes(explicit, 40 * GIB) == 3 * GIB
