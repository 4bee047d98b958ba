"""``lre doctor``'s cache checks: what the running lre says about its cache.

The running lre's ``/status`` carries a ``cache`` list: a store overrunning
its ``max_bytes`` because the cache contract keeps blobs clients rely on,
and why the upstream action cache keeps missing (the environment keys and
platform properties of the missed actions). Each becomes a WARN with the
step to take; none is one OK. Not running, or no status listener: SKIP.
"""

from __future__ import annotations

from typing import Any

from lre.cli._checks import Check
from lre.cli._doctor_host import fetch_status
from lre.cli._running import Lookup


def _fix(notice: str) -> str:
    if notice.startswith("upstream action cache"):
        return (
            "make the laptop's action keys equal CI's: compare one action of "
            "`--execution_log_json_file` from both, then align the flags that differ "
            "(client.exec_properties for platform properties CI sends)"
        )
    return (
        "free disk space, or raise eviction_policy.max_bytes; blobs clients were told "
        "exist go once eviction_policy.keep_told passes (or `lre cache gc --force`)"
    )


def cache_checks(lookup: Lookup, status: dict[str, Any] | None = None) -> list[Check]:
    """One check per cache notice of the running lre (see the module docstring)."""
    server = lookup.server
    if server is None or not server.status_address:
        return [Check("cache", "SKIP", "lre is not running with a status listener")]
    if status is None:
        try:
            status = fetch_status(server.status_address)
        except (OSError, ValueError) as error:
            return [Check("cache", "SKIP", f"lre's /status did not answer: {error}")]
    notices = [str(n) for n in status.get("cache", ())]
    if not notices:
        return [Check("cache", "OK", "within max_bytes; no upstream misses to explain")]
    return [Check("cache", "WARN", notice, _fix(notice)) for notice in notices]
