"""Does a client config point at the running lre? (for ``lre doctor``)"""

from __future__ import annotations

from pathlib import Path

from lre.cli._checks import Check
from lre.cli._daemon import RunningServer


def _target_of(address: str) -> str:
    """``grpc://h:p`` / ``grpcs://h:p`` / ``h:p`` -> ``h:p``; ``unix://p`` -> ``unix:p``."""
    for scheme in ("grpc://", "grpcs://", "http://", "https://"):
        if address.startswith(scheme):
            return address.removeprefix(scheme)
    if address.startswith("unix://"):
        return "unix:" + address.removeprefix("unix://")
    return address


def points_at(
    name: str, where: Path, address: str, server: RunningServer | None, repo: Path
) -> Check:
    """Check ``name``: the client config at ``where`` sends builds to
    ``address``; OK when that is where ``server`` listens."""
    if server is None:
        # A build fails now, so this is a FAIL (doctor exits 1), not a warning.
        return Check(
            name,
            "FAIL",
            f"{where} points at {address} but lre is not running: builds fail with "
            "'Connection refused'",
            "start lre (`lre up --detach`) or build locally (`lre unlink`)",
        )
    if _target_of(address) != _target_of(server.grpc_address):
        return Check(
            name,
            "FAIL",
            f"{where} points at {address} but lre listens on {server.grpc_address}",
            f"run `lre up` in {repo} to rewrite it",
        )
    return Check(name, "OK", f"{where} points at the running lre ({server.grpc_address})")
