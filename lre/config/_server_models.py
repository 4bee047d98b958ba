"""Config models of the ``servers`` section: one class per JSON5 object.

Conventions in ``_model_fields``.
"""

from __future__ import annotations

from dataclasses import dataclass

from lre.config._model_fields import ByteSize, doc


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsServerSpec:
    cert_file: str = doc("PEM server certificate.")
    key_file: str = doc("PEM key of cert_file.")
    client_ca_file: str = doc(
        "PEM CA for client certificates; set to require mutual TLS.", default=""
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ListenerSpec:
    address: str = doc(
        '"host:port" to listen on (port 1-65535, or 0 for any free port; `lre up --port` '
        'replaces the first server\'s), or "unix:/path" for a Unix socket (mode 0600).',
        default="127.0.0.1:50051",
    )
    tls: TlsServerSpec | None = doc(
        "TLS; required (or auth_token_file) off loopback.", default=None
    )
    auth_token_file: str = doc(
        'File holding a bearer token clients must send as "authorization: Bearer <token>"; '
        "the client config lre writes carries it (file mode 0600).",
        default="",
    )
    max_message_bytes: ByteSize = doc(
        "Largest gRPC message received or sent.", default=ByteSize(64 << 20)
    )
    max_connections: int = doc(
        "Connections this listener holds at once, from every client together; one past "
        "it is closed as it arrives (its client sees UNAVAILABLE and retries) while calls "
        "on the connections held go on, so a flood of connections cannot take every "
        "descriptor lre has (docs/security.md). Bazel opens up to 100 per build "
        "(--remote_max_connections). 0 = no bound.",
        default=1000,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceSpec:
    instance_name: str = doc(
        'Instance name clients send; "*" matches any name not listed elsewhere.', default="*"
    )
    cas_store: str = doc("Store serving CAS and ByteStream.")
    ac_store: str = doc("Store serving the action cache.", default="")
    scheduler: str = doc("Scheduler for Execute (empty = execution disabled).", default="")
    ac_read_only: bool = doc("Refuse UpdateActionResult.", default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSpec:
    name: str = doc("Server name (logs).", default="main")
    listener: ListenerSpec = doc("Where clients connect.", default_factory=ListenerSpec)
    instances: tuple[InstanceSpec, ...] = doc("Instance names served and their backends.")
    max_batch_total_size_bytes: ByteSize = doc(
        "Advertised batch limit; kept well below max_message_bytes.",
        default=ByteSize(4_000_000),
    )
