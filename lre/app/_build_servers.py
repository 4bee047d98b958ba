"""Build the gRPC servers (part of the composition root).

Each ``servers[]`` entry becomes one ``GrpcServer`` with the cache,
Execution and Operations services over its instances; every server shares
one Trio bridge, one RPC metrics table and one local-peer guard.
"""

from __future__ import annotations

from collections.abc import Callable

from lre.app._history import HistoryRecorder
from lre.app._stores import Stores
from lre.config import Config
from lre.scheduler import ActionScheduler
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
    bearer_token,
    cache_servicers,
)


def build_servers(
    config: Config,
    stores: Stores,
    *,
    front: Callable[[str], ActionScheduler],
    bridge: TrioBridge,
    rpc_metrics: RpcMetrics,
    local_peers: LocalPeers | None,
    history: HistoryRecorder | None,
) -> list[GrpcServer]:
    """The configured gRPC servers (none listens yet).

    ``front`` gives what an instance's scheduler name is served by (the
    forward scheduler on its chain, else the local one); GetActionResult hits
    go to ``history`` too, since no scheduler sees them, and so does every
    call's start and end (``history.spans``: each build's span). Raises what the
    stores raise for a name that is not built (``StoreBuildError``).
    ``local_peers``: the listener guard every listener judges its calls by,
    None where no action shares lre's network (no call is judged then).
    """
    servers: list[GrpcServer] = []
    for server in config.servers:
        backends: dict[str, InstanceBackends] = {}
        for instance in server.instances:
            backends[instance.instance_name] = InstanceBackends(
                cas=stores.blob(instance.cas_store),
                action_cache=(
                    stores.results(instance.ac_store, instance.cas_store)
                    if instance.ac_store
                    else None
                ),
                scheduler=front(instance.scheduler) if instance.scheduler else None,
                ac_read_only=instance.ac_read_only,
            )
        instances = Instances(backends)
        options = CacheServiceOptions(
            max_batch_total_size_bytes=int(server.max_batch_total_size_bytes)
        )
        servicers = [
            *cache_servicers(bridge, instances, options),
            ExecutionServicer(bridge, instances),
            OperationsServicer(bridge, instances),
        ]
        lookup_hits = LookupHits(history.record) if history is not None else None
        servers.append(
            GrpcServer(
                ServerOptions.from_listener(
                    server.listener,
                    bearer_token=bearer_token(server.listener),
                    rpc_metrics=rpc_metrics,
                    lookup_hits=lookup_hits,
                    spans=history.spans if history is not None else None,
                    local_peers=local_peers,
                ),
                servicers,
                bridge,
                own_bridge=False,
                name=server.name,
            )
        )
    return servers
