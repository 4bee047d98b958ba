"""Build the local workers and what they share (part of the composition root).

Each ``workers[].local`` entry becomes a ``LocalWorker`` pulling from its
scheduler; workers of one containment mode share one backend, and each
worker's host memory readings (``PressureMonitor``) are shared with its
scheduler's admission.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from lre.app._build_error import AppBuildError
from lre.app._stores import Stores, temp_path_of
from lre.config import Config, WorkerResources, state_dir_of
from lre.errors import InvalidArgument
from lre.scheduler import Scheduler
from lre.worker import (
    Containment,
    ContainmentUnavailable,
    LocalWorker,
    PressureMonitor,
    WorkerHost,
    choose_containment,
    refuse_unreachable,
    refuse_unsafe_writable,
    resolve_action_user,
)


def lre_directories(config: Config) -> tuple[str, ...]:
    """Every path of lre's own that actions must not see (the state
    directory, each filesystem store's content and temporary paths, each
    worker's work directory, the listeners' token and TLS key files); see
    lre/worker/view/_view.py."""
    paths = [str(state_dir_of(config))]
    for store in config.stores:
        if store.filesystem is not None:
            paths += [
                store.filesystem.content_path,
                os.path.normpath(temp_path_of(store.filesystem)),
            ]
    for worker in config.workers:
        if worker.local is not None:
            paths.append(worker.local.work_directory)
    for server in config.servers:  # secrets: shown as /dev/null
        paths.append(server.listener.auth_token_file)
        if server.listener.tls is not None:
            paths.append(server.listener.tls.key_file)
    return tuple(p for p in paths if p)


def build_pressure_monitors(config: Config) -> dict[str, PressureMonitor]:
    """The host memory readings of each local worker (by name), with its
    ``memory_headroom``: the only ``PressureMonitor``s lre builds, shared by
    the worker's memory control and its scheduler's admission."""
    monitors: dict[str, PressureMonitor] = {}
    for worker in config.workers:
        local = worker.local
        if local is not None and local.name not in monitors:
            monitors[local.name] = PressureMonitor(int(local.resources.memory_headroom))
    return monitors


def build_workers(
    config: Config,
    stores: Stores,
    schedulers: Mapping[str, Scheduler],
    *,
    resources: Mapping[str, WorkerResources],
    pressure: Mapping[str, PressureMonitor],
) -> tuple[list[LocalWorker], dict[str, Containment]]:
    """The local workers, in config order, and the containment backends they
    use (one per mode).

    Raises ``AppBuildError`` naming the worker's field when its containment
    cannot work on this host, when ``network: block`` asks for what its
    containment cannot do, when its ``action_user`` cannot be used, or when
    ``containment: "strict"`` would run root actions with every capability
    (``Containment.root_actions_missing``).
    """
    workers: list[LocalWorker] = []
    containments: dict[str, Containment] = {}
    hidden = lre_directories(config)
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
        viewed = local.sandbox_view and containment.can_view and containment.name == "pidns"
        try:
            identity = resolve_action_user(local.action_user, viewed=viewed)
        except ValueError as error:
            raise AppBuildError(f"workers[{index}].local.action_user: {error}") from None
        if local.sandbox_view and containment.can_view:
            try:
                refuse_unsafe_writable(
                    local.sandbox_writable_paths, hidden, "sandbox_writable_paths"
                )
            except InvalidArgument as error:
                raise AppBuildError(f"workers[{index}].local.{error.message}") from None
        for path in local.sandbox_writable_paths:
            if identity is None:
                break
            try:
                refuse_unreachable(path, identity.owner, "sandbox_writable_paths")
            except InvalidArgument as error:
                raise AppBuildError(f"workers[{index}].local.{error.message}") from None
        unlocked = containment.root_actions_missing() if identity is None else ()
        if local.containment == "strict" and viewed and unlocked:
            raise AppBuildError(
                f"workers[{index}].local.containment: 'strict' refuses to run root actions "
                f"that {unlocked[0].removeprefix('root actions ')}; set action_user: "
                '"unprivileged" or run lre on Linux 6.15+'
            )
        upload = local.upload_action_result
        workers.append(
            LocalWorker(
                local,
                resources=resources[local.name],
                scheduler=schedulers[local.scheduler],
                store=stores.blob(local.cas_store),
                pressure=pressure[local.name],
                directories=stores.directories(local.cas_store),
                action_cache=(
                    stores.results(upload.ac_store, local.cas_store)
                    if upload.ac_store and upload.upload_ac_results_strategy != "never"
                    else None
                ),
                host=WorkerHost(containment, identity, hidden),
            )
        )
    return workers, containments
