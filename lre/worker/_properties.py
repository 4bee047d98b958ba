"""What a worker offers: platform property values and resource capacity."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

import trio

from lre.config import (
    LocalWorkerSpec,
    PlatformPropertySpec,
    ResourceSpec,
    auto_cpu_count,
    auto_max_inflight_tasks,
    auto_memory_budget,
)
from lre.errors import FailedPrecondition


async def resolve_properties(
    properties: Mapping[str, PlatformPropertySpec], *, timeout: float = 30.0
) -> dict[str, frozenset[str]]:
    """Values of every property: its ``values``, plus one per non-empty output
    line of its ``query_cmd`` (run once through ``/bin/sh -c``).

    Raises ``FailedPrecondition`` naming the property when a query fails,
    times out, or a property ends up with no value.
    """
    resolved: dict[str, frozenset[str]] = {}
    for name, spec in properties.items():
        values = set(spec.values)
        if spec.query_cmd:
            with trio.move_on_after(timeout) as scope:
                completed = await trio.run_process(
                    ["/bin/sh", "-c", spec.query_cmd],
                    check=False,
                    stdin=subprocess.DEVNULL,
                    capture_stdout=True,
                    capture_stderr=True,
                )
            if scope.cancelled_caught:
                raise FailedPrecondition(
                    f"platform_properties.{name}.query_cmd: still running after {timeout:g} s"
                )
            if completed.returncode != 0:
                raise FailedPrecondition(
                    f"platform_properties.{name}.query_cmd: exited with "
                    f"{completed.returncode}: {completed.stderr.decode(errors='replace')[:200]}"
                )
            values.update(
                line.strip() for line in completed.stdout.decode().splitlines() if line.strip()
            )
        if not values:
            raise FailedPrecondition(f"platform_properties.{name}: no value offered")
        resolved[name] = frozenset(values)
    return resolved


def cpu_count(resources: ResourceSpec) -> int:
    """CPUs offered: the configured count, or config's ``auto`` rule (the CPUs
    this process may use)."""
    if resources.cpu_count != "auto":
        return resources.cpu_count
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        affinity = None
    return auto_cpu_count(affinity, os.cpu_count())


#: Memory capacity offered when ``memory_budget`` is 0 ("no budget").
UNLIMITED_MEMORY = 1 << 60


def memory_budget(resources: ResourceSpec) -> int:
    """Bytes all actions may reserve together (``auto``: 75% of RAM minus the
    floor; 0: no budget, offered as ``UNLIMITED_MEMORY``)."""
    if resources.memory_budget == 0:
        return UNLIMITED_MEMORY
    if resources.memory_budget != "auto":
        return int(resources.memory_budget)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return auto_memory_budget(total, int(resources.memory_floor))


def max_inflight(spec: LocalWorkerSpec) -> int:
    """Actions at once at most (0 = unlimited; ``auto`` = config's rule: the
    whole CPUs of capacity, CPU count x overcommit)."""
    if spec.max_inflight_tasks == "auto":
        return auto_max_inflight_tasks(cpu_count(spec.resources), spec.resources.cpu_overcommit)
    return spec.max_inflight_tasks
