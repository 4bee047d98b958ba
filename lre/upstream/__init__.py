"""The client side of an upstream REAPI server (NativeLink, Buildbarn,
BuildGrid, another lre): connections, headers, retries, concurrency and
health (``UpstreamClient``), the error for an unreachable upstream, and the hop
from Trio to grpc.aio on its own asyncio thread (``UpstreamLoop``).

``UpstreamLoop`` wakes Trio through an ``lre.hop.Mailbox``, as the
server-side bridge of ``lre.service`` does.

``name_os_thread`` is ``lre.hop``'s, exported here too for the worker's
spawner threads, which import it from this package.

Users: ``lre.cas`` (``GrpcStore``, ``GrpcActionCache``), the forward
scheduler (``lre.scheduler``) and the composition root (``lre.app``).
"""

from lre.hop import name_os_thread
from lre.upstream._client import Connection, Metadata, UpstreamClient
from lre.upstream._errors import UpstreamUnavailable
from lre.upstream._health import HealthState, UpstreamStatistics
from lre.upstream._loop import UpstreamLoop

__all__ = [
    "Connection",
    "HealthState",
    "Metadata",
    "UpstreamClient",
    "UpstreamLoop",
    "UpstreamStatistics",
    "UpstreamUnavailable",
    "name_os_thread",
]
