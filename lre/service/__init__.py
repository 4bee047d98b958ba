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
- Status mapping (the only one in lre): ``rpc_status_of``, ``abort_with``,
  ``unary_rpc`` / ``stream_rpc`` decorators for servicer methods.
- ``request_metadata_from``: the client's RequestMetadata header, as the
  scheduler's ``RequestInfo``.
- ``BearerTokenInterceptor`` / ``auth_interceptors``: bearer-token
  authentication of a listener (``AuthTokenError`` for an unusable token file).
- ``RpcMetrics``: counts and latencies per RPC method and status code; its
  ``interceptor()`` goes into ``ServerOptions.interceptors`` and its
  ``statistics()`` (an ``RpcStatistics``) feeds ``/metrics``; ``method_label``
  is the method label it records under.
"""

from lre.service._auth import (
    AuthStatistics,
    AuthTokenError,
    BearerTokenInterceptor,
    auth_interceptors,
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
from lre.service._instances import WILDCARD, InstanceBackends, Instances
from lre.service._local_peers import LocalPeers, PeerVerdict
from lre.service._lookup_hits import LookupHits
from lre.service._metadata import (
    REQUEST_METADATA_KEY,
    request_metadata_from,
)
from lre.service._resource_names import BlobResource, parse_read_resource, parse_write_resource
from lre.service._rpc_metrics import MethodStatistics, RpcMetrics, RpcStatistics, method_label
from lre.service._server import MAX_PENDING_REQUESTS, GrpcServer, ServerOptions, Servicer
from lre.service._status import (
    INTERNAL_MESSAGE,
    STATUS_DETAILS_KEY,
    abort_with,
    log_exception,
    rpc_status_of,
    stream_rpc,
    unary_rpc,
)
from lre.service.execution import ExecutionServicer
from lre.service.operations import OperationsServicer

__all__ = [
    "INTERNAL_MESSAGE",
    "MAX_PENDING_REQUESTS",
    "REQUEST_METADATA_KEY",
    "STATUS_DETAILS_KEY",
    "WILDCARD",
    "ActionCacheServicer",
    "AuthStatistics",
    "AuthTokenError",
    "BearerTokenInterceptor",
    "BlobResource",
    "BridgeStatistics",
    "ByteStreamServicer",
    "CacheServiceOptions",
    "CapabilitiesServicer",
    "ContentAddressableStorageServicer",
    "ExecutionServicer",
    "GrpcServer",
    "InstanceBackends",
    "Instances",
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
    "abort_with",
    "auth_interceptors",
    "cache_servicers",
    "log_exception",
    "method_label",
    "parse_read_resource",
    "parse_write_resource",
    "read_token_file",
    "request_metadata_from",
    "rpc_status_of",
    "stream_rpc",
    "unary_rpc",
]
