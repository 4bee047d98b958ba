"""The gRPC front: grpc.aio on its own thread, bridged into the Trio run.

- ``TrioBridge``: the per-request hop (``call``, ``stream``,
  ``call_with_requests``); start it with ``nursery.start(bridge.run)`` or
  let ``GrpcServer`` own it.
- ``GrpcServer`` / ``ServerOptions``: one listener; ``await
  nursery.start(server.serve)`` returns the bound address.
- ``Instances`` / ``InstanceBackends``: instance name -> stores, action
  cache, scheduler.
- ``cache_servicers``: Capabilities, CAS, ByteStream and ActionCache;
  ``ExecutionServicer`` and ``OperationsServicer`` over the instances'
  schedulers.
- Status mapping (the only one in lre, ``_status``): the servicers'
  ``unary_rpc`` / ``stream_rpc`` decorators turn ``lre.errors`` into statuses.
- ``_metadata``: the client's RequestMetadata header, read as the
  scheduler's ``RequestInfo``.
- ``BearerToken`` / ``bearer_token``: bearer-token authentication of a
  listener (``AuthTokenError`` for an unusable token file), given to it as
  ``ServerOptions.bearer_token``.
- ``RpcMetrics``: counts and latencies per RPC method and status code,
  given to a listener as ``ServerOptions.rpc_metrics``; its ``statistics()``
  (an ``RpcStatistics``) feeds ``/metrics``.
- Every call passes one interceptor (``_call_checks``): token, the listener
  guard (``LocalPeers``, only while actions share lre's network), request
  decoding and metrics around one wrapper per method.
- ``InvocationSpans``: each build's first request and last reply over
  every call (given to a listener as ``ServerOptions.spans``).
"""

from lre.service._auth import (
    AuthStatistics,
    AuthTokenError,
    BearerToken,
    bearer_token,
    read_token_file,
)
from lre.service._bridge import BridgeStatistics, TrioBridge
from lre.service._cache_servicers import (
    ActionCacheServicer,
    ByteStreamServicer,
    CacheServiceOptions,
    CapabilitiesServicer,
    ContentAddressableStorageServicer,
    cache_servicers,
)
from lre.service._instances import InstanceBackends, Instances
from lre.service._invocation_spans import InvocationSpans
from lre.service._local_peers import LocalPeers, PeerVerdict
from lre.service._lookup_hits import LookupHits
from lre.service._rpc_metrics import MethodStatistics, RpcMetrics, RpcStatistics
from lre.service._server import GrpcServer, ServerOptions, Servicer
from lre.service.execution import ExecutionServicer
from lre.service.operations import OperationsServicer

__all__ = [
    "ActionCacheServicer",
    "AuthStatistics",
    "AuthTokenError",
    "BearerToken",
    "BridgeStatistics",
    "ByteStreamServicer",
    "CacheServiceOptions",
    "CapabilitiesServicer",
    "ContentAddressableStorageServicer",
    "ExecutionServicer",
    "GrpcServer",
    "InstanceBackends",
    "Instances",
    "InvocationSpans",
    "LocalPeers",
    "LookupHits",
    "MethodStatistics",
    "OperationsServicer",
    "PeerVerdict",
    "RpcMetrics",
    "RpcStatistics",
    "ServerOptions",
    "Servicer",
    "TrioBridge",
    "bearer_token",
    "cache_servicers",
    "read_token_file",
]
