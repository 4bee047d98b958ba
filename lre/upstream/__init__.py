"""The client side of an upstream REAPI server (NativeLink, Buildbarn,
BuildGrid, another lre): connections, headers, retries, concurrency and
health (``UpstreamClient``), the domain errors of its answers, and the hop
from Trio to grpc.aio on its own asyncio thread (``UpstreamLoop``).

``Mailbox`` is the one mechanism lre uses to cross between an asyncio
thread and the Trio thread: ``UpstreamLoop`` wakes Trio through one, and the
server-side bridge of ``lre.service`` crosses both ways through them.
``name_os_thread`` names a thread lre starts where the kernel shows it.

Users: ``lre.cas`` (``GrpcStore``, ``GrpcActionCache``), the forward
scheduler (``lre.scheduler``) and the composition root (``lre.app``).
"""

from lre.upstream._client import (
    DEFAULT_BATCH_LIMIT,
    Connection,
    Metadata,
    UpstreamClient,
    metadata_of,
    parse_endpoint,
)
from lre.upstream._errors import UpstreamUnavailable, error_for_code
from lre.upstream._health import HealthState, UpstreamHealth, UpstreamStatistics
from lre.upstream._loop import UpstreamLoop
from lre.upstream._mailbox import Mailbox
from lre.upstream._thread_name import name_os_thread

__all__ = [
    "DEFAULT_BATCH_LIMIT",
    "Connection",
    "HealthState",
    "Mailbox",
    "Metadata",
    "UpstreamClient",
    "UpstreamHealth",
    "UpstreamLoop",
    "UpstreamStatistics",
    "UpstreamUnavailable",
    "error_for_code",
    "metadata_of",
    "name_os_thread",
    "parse_endpoint",
]
