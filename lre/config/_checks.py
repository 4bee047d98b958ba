"""Checks on a decoded ``Config`` that types alone cannot express.

Run by the loader after decoding; every problem found is returned (the
loader raises them together). Covered:

- names: stores, schedulers, workers and servers have unique, non-empty
  names; instance names are unique per server (so at most one ``"*"``);
- references: every store or scheduler a block names exists and is of a
  kind that can do the job (an action cache is not a grpc CAS, a worker's
  CAS is a filesystem store or a fast_slow store whose fast tier is one, a
  worker takes work from a simple scheduler, ...); no reference cycles;
- values: no unbounded store (``max_bytes`` 0), ascending memory ladder,
  positive limits, intervals and fair-share weights, endpoint and listener address syntax, TLS
  or a token on a listener that is not on loopback.
"""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from lre.config._models import Config
from lre.config._paths import Path, Problem
from lre.config._scheduler_models import SchedulerResourceSpec, SchedulerSpec
from lre.config._server_models import ListenerSpec
from lre.config._store_models import EvictionPolicy, GrpcStoreSpec, StoreSpec
from lre.config._worker_models import ActionLimitsSpec, LocalWorkerSpec, ResourceSpec

_T = TypeVar("_T")

_ROLE_NAMES = {"cas": "a CAS store", "ac": "an action cache store"}


def check_config(config: Config) -> list[Problem]:
    """Every cross-reference and value problem in ``config`` (empty = valid)."""
    checker = _Checker(config)
    checker.run()
    return checker.problems


def store_kind(store: StoreSpec) -> str:
    """The ONE_OF key that is set on ``store`` (``"filesystem"``, ...)."""
    return _kind(store, StoreSpec.ONE_OF)


def scheduler_kind(scheduler: SchedulerSpec) -> str:
    """The ONE_OF key that is set on ``scheduler`` (``"simple"``, ...)."""
    return _kind(scheduler, SchedulerSpec.ONE_OF)


def _kind(spec: object, one_of: tuple[str, ...]) -> str:
    for name in one_of:
        if getattr(spec, name) is not None:
            return name
    raise ValueError(f"{type(spec).__name__} has none of {one_of} set")


@dataclass
class _Checker:
    config: Config
    problems: list[Problem] = field(default_factory=list)
    stores: dict[str, StoreSpec] = field(default_factory=dict)
    schedulers: dict[str, SchedulerSpec] = field(default_factory=dict)

    def fail(self, path: Path, message: str) -> None:
        self.problems.append(Problem(path, message))

    def run(self) -> None:
        config = self.config
        if not config.stores:
            self.fail(("stores",), "at least one store is needed")
        if not config.servers:
            self.fail(("servers",), "at least one server is needed")
        self.stores = self._unique("stores", [(s.name, s) for s in config.stores], "store")
        self.schedulers = self._unique(
            "schedulers", [(s.name, s) for s in config.schedulers], "scheduler"
        )
        for i, store in enumerate(config.stores):
            self._store(("stores", i), store)
        self._store_cycles()
        for i, scheduler in enumerate(config.schedulers):
            self._scheduler(("schedulers", i), scheduler)
        self._scheduler_cycles()
        workers = [(w.local.name, w.local) for w in config.workers if w.local is not None]
        self._unique("workers", workers, "worker", key=("local", "name"))
        self._distinct_paths(
            [
                (("workers", i, "local", "work_directory"), w.local.work_directory)
                for i, w in enumerate(config.workers)
                if w.local is not None
            ],
            "work_directory",
        )
        for i, worker in enumerate(config.workers):
            if worker.local is not None:
                self._worker(("workers", i, "local"), worker.local)
        self._unique("servers", [(s.name, s) for s in config.servers], "server")
        addresses: dict[str, int] = {}
        for i, server in enumerate(config.servers):
            path: Path = ("servers", i)
            self._listener((*path, "listener"), server.listener)
            earlier = addresses.setdefault(server.listener.address, i)
            if earlier != i:
                self.fail(
                    (*path, "listener", "address"),
                    f"{server.listener.address!r} is also the address of servers[{earlier}]",
                )
            if server.max_batch_total_size_bytes >= server.listener.max_message_bytes:
                self.fail(
                    (*path, "max_batch_total_size_bytes"),
                    f"{server.max_batch_total_size_bytes} must be below "
                    f"listener.max_message_bytes ({server.listener.max_message_bytes})",
                )
            if not server.instances:
                self.fail((*path, "instances"), "at least one instance is needed")
            seen: dict[str, int] = {}
            for j, instance in enumerate(server.instances):
                ipath: Path = (*path, "instances", j)
                first = seen.setdefault(instance.instance_name, j)
                if first != j:
                    self.fail(
                        (*ipath, "instance_name"),
                        f"{instance.instance_name!r} is already served by "
                        f"instances[{first}] of this server",
                    )
                self._store_ref((*ipath, "cas_store"), instance.cas_store, "cas")
                if instance.ac_store:
                    self._store_ref((*ipath, "ac_store"), instance.ac_store, "ac")
                if instance.scheduler:
                    self._scheduler_ref((*ipath, "scheduler"), instance.scheduler)
        self._global()

    # ---------------------------------------------------------------- names

    def _unique(
        self,
        section: str,
        named: Iterable[tuple[str, _T]],
        what: str,
        key: tuple[str, ...] = ("name",),
    ) -> dict[str, _T]:
        out: dict[str, _T] = {}
        first: dict[str, int] = {}
        for i, (name, item) in enumerate(named):
            if not name:
                self.fail((section, i, *key), f"a {what} name cannot be empty")
                continue
            if name in out:
                self.fail(
                    (section, i, *key),
                    f"{what} name {name!r} is already used by {section}[{first[name]}]",
                )
                continue
            out[name] = item
            first[name] = i
        return out

    def _distinct_paths(self, items: list[tuple[Path, str]], what: str) -> None:
        seen: dict[str, Path] = {}
        for path, value in items:
            if not value:
                self.fail(path, f"{what} cannot be empty")
            elif value in seen:
                self.fail(
                    path,
                    f"{value!r} is already the {what} of another block; "
                    "two users of one directory would corrupt each other",
                )
            else:
                seen[value] = path

    # --------------------------------------------------------------- stores

    def _store(self, path: Path, store: StoreSpec) -> None:
        if store.memory is not None:
            self._eviction((*path, "memory", "eviction_policy"), store.memory.eviction_policy)
        if store.filesystem is not None:
            spec = store.filesystem
            fpath = (*path, "filesystem")
            if not spec.content_path:
                self.fail((*fpath, "content_path"), "cannot be empty")
            self._eviction((*fpath, "eviction_policy"), spec.eviction_policy)
            if spec.read_buffer_size <= 0:
                self.fail((*fpath, "read_buffer_size"), "must be above 0")
        if store.fast_slow is not None:
            spec2 = store.fast_slow
            fpath = (*path, "fast_slow")
            self._store_ref((*fpath, "fast"), spec2.fast, "any")
            self._store_ref((*fpath, "slow"), spec2.slow, "any")
            fast = self.stores.get(spec2.fast)
            if fast is not None and fast.grpc is not None:
                self.fail(
                    (*fpath, "fast"), f"{spec2.fast!r} is a grpc store; the fast tier must be local"
                )
            if spec2.fast == spec2.slow:
                self.fail((*fpath, "slow"), f"{spec2.slow!r} is also the fast tier")
        if store.verify is not None:
            self._store_ref((*path, "verify", "backend"), store.verify.backend, "any")
        if store.grpc is not None:
            self._grpc_store((*path, "grpc"), store.grpc)

    def _grpc_store(self, path: Path, spec: GrpcStoreSpec) -> None:
        if not spec.endpoints:
            self.fail((*path, "endpoints"), "at least one endpoint is needed")
        for i, endpoint in enumerate(spec.endpoints):
            self._endpoint((*path, "endpoints", i, "address"), endpoint.address)
        if spec.connections_per_endpoint < 1:
            self.fail((*path, "connections_per_endpoint"), "must be at least 1")
        if spec.max_concurrent_requests < 1:
            self.fail((*path, "max_concurrent_requests"), "must be at least 1")
        if spec.retry.max_retries < 0:
            self.fail((*path, "retry", "max_retries"), "cannot be negative")
        if spec.retry.max_delay < spec.retry.delay:
            self.fail(
                (*path, "retry", "max_delay"),
                f"{spec.retry.max_delay} is below retry.delay ({spec.retry.delay})",
            )

    def _eviction(self, path: Path, policy: EvictionPolicy) -> None:
        if policy.max_bytes == 0:
            self.fail(
                (*path, "max_bytes"), '0 would make the store unbounded; give a size or "auto"'
            )
        elif isinstance(policy.max_bytes, int) and policy.evict_bytes >= policy.max_bytes:
            self.fail(
                (*path, "evict_bytes"),
                f"{policy.evict_bytes} must be below max_bytes ({policy.max_bytes})",
            )

    def _store_cycles(self) -> None:
        def targets(store: StoreSpec) -> list[str]:
            if store.fast_slow is not None:
                return [store.fast_slow.fast, store.fast_slow.slow]
            if store.verify is not None:
                return [store.verify.backend]
            return []

        graph = {n: targets(s) for n, s in self.stores.items()}
        self._refuse_cycles("stores", [s.name for s in self.config.stores], graph, "refer to")

    def _store_ref(self, path: Path, name: str, role: str) -> None:
        """``name`` must be a store usable as ``role``: "cas", "ac" or "any"."""
        store = self.stores.get(name)
        if store is None:
            self._missing(path, name, "store", self.stores)
            return
        if role == "any":
            return
        problem = self._role_problem(name, role, set())
        if problem:
            self.fail(path, problem)

    def _role_problem(self, name: str, role: str, seen: set[str]) -> str:
        """Why store ``name`` cannot serve as ``role`` ("" if it can)."""
        store = self.stores.get(name)
        if store is None or name in seen:
            return ""
        seen.add(name)
        if store.grpc is not None and store.grpc.store_type != role:
            return (
                f"store {name!r} is a grpc {store.grpc.store_type} store; "
                f"{_ROLE_NAMES[role]} is needed here"
            )
        if store.verify is not None:
            if role == "ac":
                return (
                    f"store {name!r} is a verify store; action cache entries are "
                    "keyed by action digest, not by their content's hash"
                )
            return self._role_problem(store.verify.backend, role, seen)
        if store.fast_slow is not None:
            return self._role_problem(store.fast_slow.fast, role, seen) or self._role_problem(
                store.fast_slow.slow, role, seen
            )
        return ""

    # ----------------------------------------------------------- schedulers

    def _scheduler(self, path: Path, scheduler: SchedulerSpec) -> None:
        if scheduler.simple is not None:
            spec = scheduler.simple
            spath = (*path, "simple")
            if spec.ac_store:
                self._store_ref((*spath, "ac_store"), spec.ac_store, "ac")
            if spec.cas_store:
                self._store_ref((*spath, "cas_store"), spec.cas_store, "cas")
            if spec.max_job_retries < 0:
                self.fail((*spath, "max_job_retries"), "cannot be negative")
            self._scheduler_resources((*spath, "resources"), spec.resources)
            if not 0 < spec.progress_interval_s <= 30:
                self.fail(
                    (*spath, "progress_interval_s"),
                    f"{spec.progress_interval_s:g} must be above 0 and at most 30 "
                    "(clients' keepalives expire otherwise)",
                )
            for repository, weight in spec.fair_share.weights.items():
                if not 0 < weight < 1e6:
                    self.fail(
                        (*spath, "fair_share", "weights", repository),
                        f"{weight:g} must be above 0 and below 1000000",
                    )
        if scheduler.property_modifier is not None:
            self._scheduler_ref(
                (*path, "property_modifier", "scheduler"), scheduler.property_modifier.scheduler
            )
        if scheduler.forward is not None:
            spec3 = scheduler.forward
            fpath = (*path, "forward")
            self._scheduler_ref((*fpath, "local"), spec3.local)
            self._endpoint((*fpath, "endpoint", "address"), spec3.endpoint.address)
            if spec3.upstream_cas_store:
                store = self.stores.get(spec3.upstream_cas_store)
                if store is None:
                    self._missing(
                        (*fpath, "upstream_cas_store"),
                        spec3.upstream_cas_store,
                        "store",
                        self.stores,
                    )
                elif store.grpc is None or store.grpc.store_type != "cas":
                    self.fail(
                        (*fpath, "upstream_cas_store"),
                        f"store {spec3.upstream_cas_store!r} is a {store_kind(store)} "
                        "store; a grpc store with store_type cas is needed here",
                    )
            if spec3.rules.overflow_queue_depth < 0:
                self.fail((*fpath, "rules", "overflow_queue_depth"), "cannot be negative")

    def _scheduler_ref(self, path: Path, name: str) -> None:
        if name not in self.schedulers:
            self._missing(path, name, "scheduler", self.schedulers)

    def _scheduler_cycles(self) -> None:
        def targets(scheduler: SchedulerSpec) -> list[str]:
            if scheduler.property_modifier is not None:
                return [scheduler.property_modifier.scheduler]
            if scheduler.forward is not None:
                return [scheduler.forward.local]
            return []

        graph = {n: targets(s) for n, s in self.schedulers.items()}
        names = [s.name for s in self.config.schedulers]
        self._refuse_cycles("schedulers", names, graph, "hand over to")

    def _refuse_cycles(
        self, section: str, names: list[str], graph: dict[str, list[str]], verb: str
    ) -> None:
        """One failure per reference cycle in ``graph``, at the first entry of
        ``section`` (whose names, in order, are ``names``) that is in it."""
        for cycle in _cycles(graph):
            self.fail(
                (section, names.index(cycle[0])),
                f"{section} {verb} each other in a cycle: " + " -> ".join([*cycle, cycle[0]]),
            )

    # -------------------------------------------------------------- workers

    def _worker(self, path: Path, worker: LocalWorkerSpec) -> None:
        scheduler = self.schedulers.get(worker.scheduler)
        if scheduler is None:
            self._missing((*path, "scheduler"), worker.scheduler, "scheduler", self.schedulers)
        elif scheduler.simple is None:
            self.fail(
                (*path, "scheduler"),
                f"scheduler {worker.scheduler!r} is a {scheduler_kind(scheduler)} "
                "scheduler; workers take actions from a simple scheduler",
            )
        store = self.stores.get(worker.cas_store)
        if store is None:
            self._missing((*path, "cas_store"), worker.cas_store, "store", self.stores)
        else:
            fast = store
            if store.fast_slow is not None:
                fast = self.stores.get(store.fast_slow.fast, store)
            if fast.filesystem is None:
                self.fail(
                    (*path, "cas_store"),
                    f"store {worker.cas_store!r} is a {store_kind(store)} store; a "
                    "worker hardlinks inputs from a filesystem store (or a fast_slow "
                    "store whose fast tier is one)",
                )
        if worker.upload_action_result.ac_store:
            self._store_ref(
                (*path, "upload_action_result", "ac_store"),
                worker.upload_action_result.ac_store,
                "ac",
            )
        if isinstance(worker.max_inflight_tasks, int) and worker.max_inflight_tasks < 0:
            self.fail(
                (*path, "max_inflight_tasks"),
                f"{worker.max_inflight_tasks} cannot be negative (0 = unlimited)",
            )
        if worker.max_processes < 0:
            self.fail((*path, "max_processes"), f"{worker.max_processes} cannot be negative")
        if worker.max_open_files < 0:
            self.fail((*path, "max_open_files"), f"{worker.max_open_files} cannot be negative")
        if not 0 <= worker.nice <= 19:
            self.fail((*path, "nice"), f"{worker.nice} is not in 0..19")
        if worker.max_action_timeout_s <= 0:
            self.fail((*path, "max_action_timeout_s"), "must be above 0")
        if not 0 < worker.default_timeout_s <= worker.max_action_timeout_s:
            self.fail(
                (*path, "default_timeout_s"),
                f"{worker.default_timeout_s} must be above 0 and at most "
                f"max_action_timeout_s ({worker.max_action_timeout_s})",
            )
        for key, prop in worker.platform_properties.items():
            if prop.values and prop.query_cmd:
                self.fail((*path, "platform_properties", key), "give values or query_cmd, not both")
        for key, source in worker.additional_environment.items():
            if source.source in ("property", "from_environment") and not source.value:
                self.fail(
                    (*path, "additional_environment", key, "value"),
                    f"source {source.source!r} needs a value naming what to read",
                )
        self._resources((*path, "resources"), worker.resources)
        self._limits((*path, "limits"), worker.limits)
        if isinstance(worker.sandbox_tmpfs_size, int) and worker.sandbox_tmpfs_size < 1 << 20:
            self.fail(
                (*path, "sandbox_tmpfs_size"),
                'must be at least 1MiB (or "auto"); a tmpfs of size 0 would be unbounded',
            )

    def _limits(self, path: Path, spec: ActionLimitsSpec) -> None:
        for name, least in (
            ("max_tree_depth", 1),
            ("max_tree_entries", 1),
            ("max_tree_directories", 1),
        ):
            value: int = getattr(spec, name)
            if value < least:
                self.fail((*path, name), f"{value} must be at least {least}")
        if spec.max_tree_directories > spec.max_tree_entries:
            self.fail(
                (*path, "max_tree_directories"),
                f"{spec.max_tree_directories} is above max_tree_entries "
                f"({spec.max_tree_entries}); directories are entries too",
            )
        if isinstance(spec.max_output_bytes, int) and spec.max_output_bytes < 1:
            self.fail((*path, "max_output_bytes"), 'must be at least 1 byte (or "auto")')

    def _resources(self, path: Path, spec: ResourceSpec) -> None:
        if isinstance(spec.cpu_count, int) and spec.cpu_count < 1:
            self.fail((*path, "cpu_count"), f"{spec.cpu_count} must be at least 1")
        if spec.cpu_overcommit <= 0:
            self.fail((*path, "cpu_overcommit"), f"{spec.cpu_overcommit} must be above 0")
        for name in ("sample_interval", "pressure_sample_interval", "max_frozen"):
            if getattr(spec, name) <= 0:
                self.fail((*path, name), "must be above 0")
        if spec.memory_hard_floor > spec.memory_headroom:
            self.fail(
                (*path, "memory_hard_floor"),
                f"{spec.memory_hard_floor} is above memory_headroom ({spec.memory_headroom}): "
                "actions would be killed before any is frozen",
            )
        if not 0 < spec.budget_short_share <= 1:
            self.fail((*path, "budget_short_share"), f"{spec.budget_short_share} must be in (0, 1]")
        if spec.pressure_threshold < 0:
            self.fail((*path, "pressure_threshold"), "must be at least 0 (0 = ignore)")
        if spec.thaw_interval < 0:
            self.fail((*path, "thaw_interval"), "must be at least 0")

    def _scheduler_resources(self, path: Path, spec: SchedulerResourceSpec) -> None:
        if spec.kill_factor < 1:
            self.fail(
                (*path, "kill_factor"),
                f"{spec.kill_factor} would kill actions below their reservation; use at least 1",
            )
        if spec.cold_memory <= 0:
            self.fail((*path, "cold_memory"), "must be above 0")
        if not spec.ladder:
            self.fail((*path, "ladder"), "at least one step is needed")
        for i, (low, high) in enumerate(zip(spec.ladder, spec.ladder[1:], strict=False)):
            if high <= low:
                self.fail(
                    (*path, "ladder", i + 1),
                    f"{high} is not above the step before it ({low}); the ladder must ascend",
                )
        if spec.ladder and spec.ladder[0] <= 0:
            self.fail((*path, "ladder", 0), "must be above 0")
        if spec.max_steps < 1:
            self.fail((*path, "max_steps"), f"{spec.max_steps} must be at least 1")
        if not 0 < spec.learner.percentile <= 100:
            self.fail(
                (*path, "learner", "percentile"), f"{spec.learner.percentile} must be in (0, 100]"
            )
        if spec.learner.factor <= 0:
            self.fail((*path, "learner", "factor"), f"{spec.learner.factor} must be above 0")

    # ------------------------------------------------------ servers, global

    def _listener(self, path: Path, spec: ListenerSpec) -> None:
        address = spec.address
        if address.startswith("unix:"):
            if len(address) == len("unix:"):
                self.fail((*path, "address"), '"unix:" needs a path, e.g. "unix:/run/lre.sock"')
            return
        if _port_out_of_range(address):
            self.fail((*path, "address"), _PORT_RANGE.format(address=address))
            return
        host = _host_port(address)
        if host is None:
            self.fail((*path, "address"), f'{address!r} is not "host:port" or "unix:/path"')
            return
        if not _is_loopback(host) and spec.tls is None and not spec.auth_token_file:
            self.fail(
                (*path, "address"),
                f"{address!r} is reachable from other machines; set tls or "
                "auth_token_file, or listen on 127.0.0.1",
            )
        if spec.max_message_bytes <= 0:
            self.fail((*path, "max_message_bytes"), "must be above 0")
        if spec.max_connections < 0:
            self.fail(
                (*path, "max_connections"),
                f"{spec.max_connections} cannot be negative (0: no bound)",
            )

    def _endpoint(self, path: Path, address: str) -> None:
        for scheme in ("grpc://", "grpcs://"):
            if address.startswith(scheme) and _host_port(address[len(scheme) :]) is not None:
                return
        self.fail(path, f'{address!r} is not "grpc://host:port" or "grpcs://host:port"')

    def _global(self) -> None:
        spec = self.config.global_
        if not spec.state_dir:
            self.fail(("global", "state_dir"), "cannot be empty")
        if spec.max_open_files < 64:
            self.fail(
                ("global", "max_open_files"),
                f"{spec.max_open_files} is too few for a server; use at least 64",
            )
        status_host = _host_port(spec.status.address) if spec.status.address else ""
        if _port_out_of_range(spec.status.address):
            self.fail(
                ("global", "status", "address"), _PORT_RANGE.format(address=spec.status.address)
            )
        elif status_host is None:
            self.fail(
                ("global", "status", "address"), f'{spec.status.address!r} is not "host:port" or ""'
            )
        elif status_host and not _is_loopback(status_host):
            self.fail(
                ("global", "status", "address"),
                f"{spec.status.address!r} is reachable from other machines, and the status "
                "listener has no authentication; listen on 127.0.0.1",
            )

    def _missing(self, path: Path, name: str, what: str, known: Mapping[str, object]) -> None:
        message = f"no {what} is named {name!r}"
        close = difflib.get_close_matches(name, list(known), n=1)
        if close:
            message += f"; did you mean {close[0]!r}?"
        elif known:
            message += f" (known: {', '.join(sorted(known))})"
        self.fail(path, message)


_PORT_RANGE = "{address!r}: the port must be 1-65535 (or 0 for any free port)"


def _port_out_of_range(address: str) -> bool:
    """True for ``"host:port"`` whose port is all digits but above 65535."""
    port = address.rpartition(":")[2]
    return port.isdigit() and int(port) > 65535


def _host_port(address: str) -> str | None:
    """The host of ``"host:port"`` / ``"[v6]:port"``, or None if malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Each reference cycle in ``graph`` once, as the list of its names."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in graph.get(node, []):
            if target not in graph:
                continue
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target) :])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node)
    return cycles
