"""``GrpcServer``: grpc.aio on its own asyncio thread, started from Trio.

The composition root builds the servicers (each with a ``register(server)``
method), a ``TrioBridge`` they share, and one ``GrpcServer`` per listener,
then starts it with ``address = await nursery.start(server.serve)``.

Start-up and shutdown use a blocking anyio portal (called from a Trio worker
thread, so the Trio thread never blocks); requests never do.
Shutdown order when the ``serve`` task is cancelled: grpc stops accepting
and, after ``grace`` seconds, cancels what is still running (clients see
UNAVAILABLE / CANCELLED), then the bridge's Trio tasks are cancelled, then
the asyncio thread ends.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio.from_thread
import grpc
import grpc.aio
import trio

from lre.config import ListenerSpec
from lre.hop import name_os_thread
from lre.service._auth import BearerToken
from lre.service._bridge import TrioBridge
from lre.service._call_checks import CallChecks
from lre.service._invocation_spans import InvocationSpans
from lre.service._local_peers import LocalPeers
from lre.service._peer_guard import PeerGuard
from lre.service._rpc_metrics import LookupHook, RpcMetrics

logger = logging.getLogger("lre.service")

#: Pending-call limits: grpc's defaults (1,000 / 3,000) drop bursts of new
#: calls as CANCELLED before any handler runs; Buck2 opens thousands.
MAX_PENDING_REQUESTS = 100_000

#: How long a call may wait in grpc core before the server takes it up.
#: grpc.aio takes up one new call at a time, so a burst of thousands of
#: streams queues in core; grpc's default (30 s) then cancels the tail of the
#: burst (seen: 379 of 5,000 held Execute streams CANCELLED on a loaded
#: laptop). Clients' own deadlines still end calls that wait too long.
MAX_UNREQUESTED_TIME_S = 3600


class Servicer(Protocol):
    """Anything that can add its handlers to a grpc.aio server."""

    def register(self, server: grpc.aio.Server) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerOptions:
    """Tuning of one listener; built from ``ListenerSpec`` by ``from_listener``.

    Keepalive: clients may ping every 10 s even without calls (Buck2 pings
    every 30 s with ``keepalive_while_idle``); the server pings idle
    connections every 60 s and drops them after 20 s without an answer.
    """

    address: str = "127.0.0.1:0"
    max_message_bytes: int = 64 << 20
    #: Connections held at once (0: no bound); grpc core closes one past it
    #: as soon as it is accepted.
    max_connections: int = 0
    max_pending_requests: int = MAX_PENDING_REQUESTS
    max_unrequested_time_s: int = MAX_UNREQUESTED_TIME_S
    grace_seconds: float = 2.0
    keepalive_time_ms: int = 60_000
    keepalive_timeout_ms: int = 20_000
    min_client_ping_interval_ms: int = 10_000
    server_credentials: grpc.ServerCredentials | None = None
    #: Interceptors run before lre's own checks (a test's recorder).
    interceptors: tuple[grpc.aio.ServerInterceptor[Any, Any], ...] = ()
    #: lre's checks of every call, all in one interceptor (``_call_checks``):
    #: a call without this bearer token ends UNAUTHENTICATED ...
    bearer_token: BearerToken | None = None
    #: ... one from a process lre started (its actions) PERMISSION_DENIED
    #: (``_peer_guard.py``; set only while actions share lre's network) ...
    local_peers: LocalPeers | None = None
    #: ... and every call is timed and counted here, a successful
    #: GetActionResult also handed to ``lookup_hits``.
    rpc_metrics: RpcMetrics | None = None
    lookup_hits: LookupHook | None = None
    #: ... and each call's start and end go to ``spans`` (its build's span).
    spans: InvocationSpans | None = None

    @classmethod
    def from_listener(cls, listener: ListenerSpec, **overrides: Any) -> ServerOptions:
        """Options for ``listener``; TLS files are read here (``OSError`` if unreadable)."""
        credentials = None
        if listener.tls is not None:
            tls = listener.tls
            with open(tls.key_file, "rb") as f:
                key = f.read()
            with open(tls.cert_file, "rb") as f:
                cert = f.read()
            root = None
            if tls.client_ca_file:
                with open(tls.client_ca_file, "rb") as f:
                    root = f.read()
            credentials = grpc.ssl_server_credentials(
                [(key, cert)], root_certificates=root, require_client_auth=root is not None
            )
        values: dict[str, Any] = {
            "address": listener.address,
            "max_message_bytes": int(listener.max_message_bytes),
            "max_connections": listener.max_connections,
            "server_credentials": credentials,
        }
        values.update(overrides)
        return cls(**values)

    def channel_options(self) -> list[tuple[str, int]]:
        bound = [("grpc.max_allowed_incoming_connections", self.max_connections)]
        return [
            *(bound if self.max_connections > 0 else []),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.server.max_pending_requests", self.max_pending_requests),
            ("grpc.server.max_pending_requests_hard_limit", self.max_pending_requests),
            ("grpc.server_max_unrequested_time_in_server", self.max_unrequested_time_s),
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", self.min_client_ping_interval_ms),
            ("grpc.http2.max_ping_strikes", 0),
            # Never share a port with another process silently.
            ("grpc.so_reuseport", 0),
        ]


class GrpcServer:
    """One gRPC listener serving ``servicers`` through ``bridge``.

    ``serve`` is the only entry point; the server stops when its task is
    cancelled. ``bridge`` is started and stopped by ``serve`` unless
    ``own_bridge=False`` (then the caller runs ``bridge.run`` itself, e.g.
    to share it between listeners).
    """

    def __init__(
        self,
        options: ServerOptions,
        servicers: Sequence[Servicer],
        bridge: TrioBridge,
        *,
        own_bridge: bool = True,
        name: str = "main",
    ) -> None:
        self.options = options
        self.servicers = tuple(servicers)
        self.bridge = bridge
        self.own_bridge = own_bridge
        self.name = name

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; ``task_status.started`` gets the bound address.

        The address is ``"host:port"`` with the real port (port 0 picks a
        free one) or ``"unix:/path"``. Raises ``OSError`` naming the address
        when it cannot be bound (nothing is left running then).
        """
        async with trio.open_nursery() as nursery:
            if self.own_bridge:
                await nursery.start(self.bridge.run)
            portal_cm = anyio.from_thread.start_blocking_portal("asyncio")
            portal = await trio.to_thread.run_sync(portal_cm.__enter__)
            try:
                server, address = await trio.to_thread.run_sync(portal.call, self._start)
                try:
                    logger.info("gRPC server %r listening on %s", self.name, address)
                    task_status.started(address)
                    await trio.sleep_forever()
                finally:
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(
                            portal.call, server.stop, self.options.grace_seconds
                        )
                        logger.info("gRPC server %r stopped", self.name)
            finally:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(portal_cm.__exit__, None, None, None)
                nursery.cancel_scope.cancel()

    async def _start(self) -> tuple[grpc.aio.Server, str]:
        """(asyncio thread) build, bind and start the grpc.aio server."""
        options = self.options
        # The first grpc.aio object starts grpc's completion-queue poller
        # thread, which inherits this thread's name; name both apart.
        name_os_thread("lre-grpc-poll")
        guard = (
            PeerGuard(options.local_peers)
            if options.local_peers is not None and not options.address.startswith("unix:")
            else None
        )
        checks = CallChecks(
            token=options.bearer_token,
            guard=guard,
            metrics=options.rpc_metrics,
            lookup_hits=options.lookup_hits,
            spans=options.spans,
        )
        server = grpc.aio.server(
            options=options.channel_options(),
            interceptors=(*options.interceptors, checks),
        )
        name_os_thread("lre-grpc-aio")
        for servicer in self.servicers:
            servicer.register(server)
        address = options.address
        try:
            if options.server_credentials is not None:
                port = server.add_secure_port(address, options.server_credentials)
            else:
                port = server.add_insecure_port(address)
        except RuntimeError as exc:
            raise OSError(f"listener.address: cannot listen on {address!r}: {exc}") from None
        if address.startswith("unix:"):
            path = address.removeprefix("unix:").removeprefix("//")
            os.chmod(path, 0o600)
            bound = address
        else:
            host = address.rsplit(":", 1)[0]
            bound = f"{host}:{port}"
            if guard is not None:
                guard.listening_on(host, port)
        await server.start()
        return server, bound
