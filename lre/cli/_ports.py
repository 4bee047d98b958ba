"""The TCP ports lre listens on: who holds one, range checks, moving with ``--port``.

Used by ``lre up`` before it starts (so a taken port is reported with its
holder instead of a raw bind error) and available to other commands that
check the setup.
"""

from __future__ import annotations

import dataclasses
import socket

import psutil
import typer

from lre.config import Config, ListenerSpec


def split_address(address: str) -> tuple[str, int] | None:
    """``"host:port"`` / ``"[v6]:port"`` -> (host, port); None for ``unix:`` or garbage."""
    if address.startswith("unix:"):
        return None
    host, _, port = address.rpartition(":")
    try:
        return host.strip("[]") or "127.0.0.1", int(port)
    except ValueError:
        return None


def _bind_clash(listening: str, wanted: str) -> bool:
    """True when a socket listening on ``listening`` keeps ``wanted`` from binding.

    IPv4-mapped IPv6 addresses (``::ffff:127.0.0.1``) count as their IPv4
    address; a wildcard address on either side clashes with every host.
    """
    have = listening.removeprefix("::ffff:")
    want = wanted.strip("[]").removeprefix("::ffff:")
    wildcards = ("0.0.0.0", "::", "")
    if have in wildcards or want in wildcards:
        return True
    if want == "localhost":
        return have in ("127.0.0.1", "::1")
    return have == want


def holder_of_port(host: str, port: int) -> str | None:
    """Who listens on ``host:port``: "pid 123 (python3)", or None when nobody does.

    Reads the socket table (/proc); a holder whose pid this user may not see
    is described without one. Returns None when the table cannot be read.
    """
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for conn in connections:
        if conn.status != psutil.CONN_LISTEN or not conn.laddr:
            continue
        if conn.laddr.port == port and _bind_clash(conn.laddr.ip, host):
            if conn.pid is None:
                return "another process (its pid is not visible to this user)"
            try:
                name = psutil.Process(conn.pid).name()
            except psutil.Error:
                name = "?"
            return f"pid {conn.pid} ({name})"
    return None


def port_is_free(host: str, port: int) -> bool:
    """True when a TCP socket can be bound to ``host:port`` right now."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]"), port))
        except OSError:
            return False
    return True


#: Where the status listener goes with --port when its configured port is
#: taken: the gRPC port plus this (the defaults, 50051 and 50061, keep the
#: same distance), else any free port.
STATUS_PORT_OFFSET = 10


#: The embedded default's gRPC and status ports.
DEFAULT_GRPC_PORT = 50051
DEFAULT_STATUS_PORT = 50061


def with_port(config: Config, port: int | None) -> Config:
    """The config with the first server's TCP port replaced by ``port``.

    The status listener follows when its configured port is taken (by a
    first lre, typically), is ``port`` itself (``--port 50061``), or is the
    default 50061 while ``port`` is not the default 50051: to
    ``port + 10`` when that is free, else to any free port (chosen when it
    binds). So a second lre started with another
    ``--port`` (and another ``LRE_HOME``) starts beside the first.
    """
    if port is None or not config.servers:
        return config
    first = config.servers[0]
    host = first.listener.address.rpartition(":")[0] or "127.0.0.1"
    if first.listener.address.startswith("unix:"):
        raise typer.BadParameter("--port: the first server listens on a Unix socket")
    listener: ListenerSpec = dataclasses.replace(first.listener, address=f"{host}:{port}")
    servers = (dataclasses.replace(first, listener=listener), *config.servers[1:])
    global_ = config.global_
    status = split_address(global_.status.address) if global_.status.address else None
    # The default status port also follows a --port other than the default
    # gRPC port: an lre moved aside with --port must not keep the default
    # status port, or the next lre on the defaults cannot start.
    aside = status is not None and status[1] == DEFAULT_STATUS_PORT and port != DEFAULT_GRPC_PORT
    if (
        status is not None
        and status[1] != 0
        and (aside or status[1] == port or not port_is_free(*status))
    ):
        status_host = global_.status.address.rpartition(":")[0]
        wanted = port + STATUS_PORT_OFFSET
        moved = wanted if wanted <= 65535 and port_is_free(status[0], wanted) else 0
        global_ = dataclasses.replace(
            global_, status=dataclasses.replace(global_.status, address=f"{status_host}:{moved}")
        )
    return dataclasses.replace(config, servers=servers, global_=global_)


def check_port(port: int | None, option: str) -> int | None:
    """``port`` when it is None or 1-65535; else typer's usage error naming ``option``."""
    if port is not None and not 1 <= port <= 65535:
        raise typer.BadParameter(f"{port} is not a port (1-65535)", param_hint=f"'{option}'")
    return port


def listeners_in_use(config: Config) -> list[str]:
    """One message per listener of ``config`` whose port another process holds.

    Covers every gRPC listener and the status listener; ports 0 and Unix
    sockets are never in use. The message names the field, the address and
    the holder ("pid 123 (python3)" where /proc shows it).
    """
    wanted = [
        (f"servers[{i}].listener.address", server.listener.address)
        for i, server in enumerate(config.servers)
    ]
    if config.global_.status.address:
        wanted.append(("global.status.address", config.global_.status.address))
    problems = []
    for field_name, address in wanted:
        hostport = split_address(address)
        if hostport is None or hostport[1] == 0:
            continue
        holder = holder_of_port(*hostport)
        if holder is not None:
            problems.append(f"{field_name} {address} is in use by {holder}")
    return problems
