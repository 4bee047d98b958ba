"""Which lre a repository's client config points at, so that one lre never
takes over (or empties) a repository another live lre serves.

``serving_elsewhere`` reads the address in the repository's live client
config (``lre.bazelrc``'s ``--remote_executor``, else the Buck2 drop-in's
``engine_address``) and tells whether something other than ``ours`` answers
there. A stopped lre's address answers nothing, so taking a repository over
from it stays possible.
"""

from __future__ import annotations

import socket
from pathlib import Path

from lre.cli._client_files import read_or_empty
from lre.cli._ports import split_address

#: Seconds to wait for the other address to accept a connection.
CONNECT_TIMEOUT_S = 1.0


def _configured_address(repo: Path) -> str:
    """``host:port`` or ``unix:PATH`` the live client config sends builds to ("" = none)."""
    for path, key in (
        (repo / "lre.bazelrc", "build:lre --remote_executor="),
        (repo / ".buckconfig.d" / "lre.buckconfig", "engine_address = "),
    ):
        for line in read_or_empty(path).splitlines():
            if line.startswith(key):
                value = line.removeprefix(key).strip()
                for scheme in ("grpcs://", "grpc://"):
                    value = value.removeprefix(scheme)
                if value.startswith("unix://"):
                    return "unix:" + value.removeprefix("unix://")
                return value
    return ""


def _normal(address: str) -> str:
    address = address.removeprefix("unix://")
    hostport = None if address.startswith("unix:") else split_address(address)
    if hostport is None:
        return address
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1", "localhost": "127.0.0.1"}
    return f"{host.get(hostport[0], hostport[0])}:{hostport[1]}"


def _answers(address: str) -> bool:
    try:
        if address.startswith("unix:"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(CONNECT_TIMEOUT_S)
                sock.connect(address.removeprefix("unix:"))
            return True
        hostport = split_address(address)
        if hostport is None:
            return False
        with socket.create_connection(hostport, timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def serving_elsewhere(repo: Path, ours: str) -> str | None:
    """The address ``repo``'s client config points at when it is not ``ours``
    and something answers there (another lre serves the repository); else None."""
    configured = _configured_address(repo)
    if not configured or _normal(configured) == _normal(ours):
        return None
    return configured if _answers(configured) else None
