"""Build the schedulers (part of the composition root).

One ``Scheduler`` per simple scheduler, shared by every name whose chain
ends there (``_scheduler_chain``); one ``ForwardScheduler`` per forward
scheduler a server instance reaches, wrapping the local scheduler of that
name; and the learned-reservation store they consult.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from lre.app._build_error import AppBuildError
from lre.app._scheduler_chain import scheduler_chain
from lre.app._stores import Stores
from lre.config import Config, state_dir_of
from lre.scheduler import (
    ActionScheduler,
    ForwardScheduler,
    RecordHook,
    ReservationLearner,
    ResourcePolicy,
    Scheduler,
    SchedulerEvent,
    UpstreamExecutor,
)
from lre.upstream import UpstreamClient, UpstreamStatistics
from lre.worker import PressureMonitor


def build_learner(config: Config) -> ReservationLearner | None:
    """One learned-reservation store per process, in the state directory.

    Uses the settings of the first simple scheduler that learns; None when
    none does. Schedulers whose learner is off do not consult it.
    """
    for spec in config.schedulers:
        if spec.simple is not None and spec.simple.resources.learner.enabled:
            res = spec.simple.resources
            return ReservationLearner.in_state_dir(
                str(state_dir_of(config)),
                res.learner,
                cold_memory_bytes=int(res.cold_memory),
            )
    return None


def build_schedulers(
    config: Config,
    stores: Stores,
    *,
    learner: ReservationLearner | None,
    pressure: Mapping[str, PressureMonitor],
    on_event: Callable[[SchedulerEvent], None],
    on_record: RecordHook | None,
) -> dict[str, Scheduler]:
    """Every configured scheduler name, mapped to the local scheduler its chain
    ends in (names sharing a simple scheduler share the object).

    ``pressure`` holds each local worker's memory readings (by worker name)
    for the live memory veto. Raises ``AppBuildError`` naming the scheduler
    when a simple one has no ``cas_store`` or a chain is broken.
    """
    by_simple: dict[str, Scheduler] = {}
    schedulers: dict[str, Scheduler] = {}
    for spec in config.schedulers:
        chain = scheduler_chain(config, spec.name)
        scheduler = by_simple.get(chain.simple_name)
        if scheduler is None:
            simple, simple_name = chain.simple, chain.simple_name
            cas_name = simple.cas_store
            if not cas_name:
                raise AppBuildError(f"schedulers[{simple_name}].simple.cas_store: required")
            res = simple.resources
            monitor = _live_memory(config, simple_name, pressure) if res.live_memory_veto else None
            scheduler = Scheduler(
                simple,
                cas=stores.blob(cas_name),
                action_cache=(
                    stores.results(simple.ac_store, cas_name) if simple.ac_store else None
                ),
                modifications=chain.modifications,
                resources=ResourcePolicy(
                    cold_memory_bytes=int(res.cold_memory),
                    ladder=tuple(int(step) for step in res.ladder),
                    max_steps=res.max_steps,
                ),
                advisor=learner if res.learner.enabled else None,
                available_memory=monitor.room_bytes if monitor is not None else None,
                memory_frozen=_frozen(monitor) if monitor is not None else None,
                on_event=on_event,
                directories=stores.directories(cas_name),
                on_record=on_record,
            )
            by_simple[chain.simple_name] = scheduler
        schedulers[spec.name] = scheduler
    return schedulers


def build_forwarders(
    config: Config,
    stores: Stores,
    schedulers: Mapping[str, Scheduler],
    *,
    on_upstream_change: Callable[[UpstreamStatistics], None],
) -> dict[str, ForwardScheduler]:
    """One forward scheduler (by name) per forward met on the chain of a
    server instance's scheduler, in the order the instances name them; each
    wraps the local scheduler of the instance's scheduler name.

    Raises ``AppBuildError`` when ``upstream_cas_store`` names no grpc store.
    """
    forwarders: dict[str, ForwardScheduler] = {}
    for server in config.servers:
        for instance in server.instances:
            if not instance.scheduler:
                continue
            chain = scheduler_chain(config, instance.scheduler)
            if chain.forward is None or chain.forward[0] in forwarders:
                continue
            forward_name, spec = chain.forward
            upstream_cas = None
            if spec.upstream_cas_store:
                stores.blob(spec.upstream_cas_store)  # builds it, or names it unknown
                upstream_cas = stores.grpc_stores.get(spec.upstream_cas_store)
                if upstream_cas is None:
                    raise AppBuildError(
                        f"schedulers[{forward_name}].forward.upstream_cas_store: "
                        f"{spec.upstream_cas_store!r} is not a grpc store"
                    )
            client = UpstreamClient([spec.endpoint], name=forward_name, headers=spec.headers)
            client.health.on_change = on_upstream_change
            executor = UpstreamExecutor(
                client,
                instance_name=spec.instance_name,
                local_cas=stores.blob(chain.simple.cas_store),
                upstream_cas=upstream_cas,
                platform=spec.platform,
                directories=stores.directories(chain.simple.cas_store),
            )
            local = schedulers[instance.scheduler]
            forwarders[forward_name] = ForwardScheduler(local, executor, rules=spec.rules)
    return forwarders


def front_scheduler(
    config: Config,
    name: str,
    schedulers: Mapping[str, Scheduler],
    forwarders: Mapping[str, ForwardScheduler],
) -> ActionScheduler:
    """What clients of scheduler ``name`` talk to: the forward scheduler on
    its chain, else the local scheduler (mypy checks here that both play
    the client role). ``KeyError`` for a forward ``build_forwarders`` did not
    build (one no server instance reaches)."""
    forward = scheduler_chain(config, name).forward
    if forward is not None:
        return forwarders[forward[0]]
    return schedulers[name]


def _live_memory(
    config: Config, simple_name: str, pressure: Mapping[str, PressureMonitor]
) -> PressureMonitor | None:
    """The memory readings of the (first) local worker pulling from the
    simple scheduler, for its live veto; None without one."""
    for worker in config.workers:
        local = worker.local
        if local is not None and scheduler_chain(config, local.scheduler).simple_name == (
            simple_name
        ):
            return pressure[local.name]
    return None


def _frozen(monitor: PressureMonitor) -> Callable[[], bool]:
    """Whether the live veto holds starts because the memory control keeps
    actions frozen (the queue then says ``frozen``)."""
    return lambda: monitor.frozen > 0
