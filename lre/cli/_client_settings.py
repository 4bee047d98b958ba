"""What the client files lre writes point at, and how to talk to it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """What the generated client files point at, and how to talk to it."""

    host: str
    port: int
    instance_name: str = "main"
    cpus: int = field(default_factory=lambda: os.cpu_count() or 2)
    #: Sent with every action (None or empty: none, so the repository's own
    #: flags decide the platform; ``lre.config.client_exec_properties`` says
    #: what ``lre up`` records: only what ``client.exec_properties`` sets).
    exec_properties: tuple[tuple[str, str], ...] | None = None
    #: The listener speaks TLS; ``tls_ca_file`` is the PEM the client trusts.
    tls: bool = False
    tls_ca_file: str = ""
    #: The listener asks for client certificates (mutual TLS).
    tls_client_auth: bool = False
    #: Bearer token clients send as ``authorization: Bearer <token>`` ("" = none).
    auth_token: str = ""
    #: Path of a Unix socket; when set, ``host`` and ``port`` are not used.
    unix_socket: str = ""

    @property
    def host_port(self) -> str:
        """``host:port``, an IPv6 host in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def bazel_endpoint(self) -> str:
        """The ``--remote_executor`` value: ``unix:``, ``grpcs://`` or ``grpc://``."""
        if self.unix_socket:
            return f"unix://{self.unix_socket}"
        return f"{'grpcs' if self.tls else 'grpc'}://{self.host_port}"

    @property
    def location(self) -> str:
        """Where lre listens, for comments and messages."""
        return f"unix:{self.unix_socket}" if self.unix_socket else self.host_port
