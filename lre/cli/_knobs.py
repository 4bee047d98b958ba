"""``lre up``'s flags for the common knobs: cache size, CPUs, memory budget,
status port. Each replaces one value of the loaded config (before "auto" is
resolved), so it wins over the config file and the default alike.

- ``--cache-size SIZE``: ``eviction_policy.max_bytes`` of the CAS the first
  local worker uses (a filesystem or memory store);
- ``--cpus N`` / ``--memory-budget SIZE``: ``resources.cpu_count`` /
  ``resources.memory_budget`` of every local worker;
- ``--status-port N``: the port of ``global.status.address`` (0: any free
  port).

A size is a number of bytes or a number with a unit (``20G``, ``500MiB``);
a bad one is typer's usage error naming the flag.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import typer

from lre.config import ByteSize, Config, parse_byte_size


@dataclass(frozen=True, slots=True)
class Knobs:
    """The values given on the command line (None: not given)."""

    cache_size: str | None = None
    cpus: int | None = None
    memory_budget: str | None = None
    status_port: int | None = None

    def flags(self) -> tuple[tuple[str, str | int | None], ...]:
        """Each knob's flag and value (None: not given)."""
        return (
            ("--cache-size", self.cache_size),
            ("--cpus", self.cpus),
            ("--memory-budget", self.memory_budget),
            ("--status-port", self.status_port),
        )

    def argv(self) -> list[str]:
        """The same flags, for the detached child."""
        out: list[str] = []
        for flag, value in self.flags():
            if value is not None:
                out += [flag, str(value)]
        return out


def _size(text: str, flag: str) -> ByteSize:
    try:
        size = parse_byte_size(text)
    except ValueError as error:
        raise typer.BadParameter(f"{text!r}: {error}", param_hint=flag) from None
    if size <= 0:
        raise typer.BadParameter(f"{text!r}: must be more than 0", param_hint=flag)
    return ByteSize(size)


def with_knobs(config: Config, knobs: Knobs) -> Config:
    """``config`` with the given knobs applied (see the module docstring)."""
    if knobs.cache_size is not None:
        config = _with_cache_size(config, _size(knobs.cache_size, "--cache-size"))
    if knobs.cpus is not None or knobs.memory_budget is not None:
        memory = (
            None if knobs.memory_budget is None else _size(knobs.memory_budget, "--memory-budget")
        )
        workers = []
        for worker in config.workers:
            local = worker.local
            if local is not None:
                resources = local.resources
                if knobs.cpus is not None:
                    resources = dataclasses.replace(resources, cpu_count=knobs.cpus)
                if memory is not None:
                    resources = dataclasses.replace(resources, memory_budget=memory)
                worker = dataclasses.replace(
                    worker, local=dataclasses.replace(local, resources=resources)
                )
            workers.append(worker)
        config = dataclasses.replace(config, workers=tuple(workers))
    if knobs.status_port is not None:
        status = config.global_.status
        host = status.address.rpartition(":")[0] if status.address else "127.0.0.1"
        status = dataclasses.replace(status, address=f"{host or '127.0.0.1'}:{knobs.status_port}")
        config = dataclasses.replace(
            config, global_=dataclasses.replace(config.global_, status=status)
        )
    return config


def _with_cache_size(config: Config, size: ByteSize) -> Config:
    locals_ = [w.local for w in config.workers if w.local is not None]
    name = locals_[0].cas_store if locals_ else "cas"
    stores = []
    found = False
    for store in config.stores:
        if store.name == name:
            if store.filesystem is not None:
                policy = dataclasses.replace(store.filesystem.eviction_policy, max_bytes=size)
                filesystem = dataclasses.replace(store.filesystem, eviction_policy=policy)
                store = dataclasses.replace(store, filesystem=filesystem)
            elif store.memory is not None:
                policy = dataclasses.replace(store.memory.eviction_policy, max_bytes=size)
                memory = dataclasses.replace(store.memory, eviction_policy=policy)
                store = dataclasses.replace(store, memory=memory)
            else:
                raise typer.BadParameter(
                    f"store {name!r} is neither a filesystem nor a memory store",
                    param_hint="--cache-size",
                )
            found = True
        stores.append(store)
    if not found:
        raise typer.BadParameter(f"the config has no store {name!r}", param_hint="--cache-size")
    return dataclasses.replace(config, stores=tuple(stores))
