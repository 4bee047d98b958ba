"""``lre doctor``'s cache checks: what the running lre says about its cache.

The running lre's ``/status`` carries a ``cache`` list: a store overrunning
its ``max_bytes`` because the cache contract keeps blobs clients rely on,
and why the upstream action cache keeps missing (the environment keys and
platform properties of the missed actions). Each becomes a WARN with the
step to take; none is one OK. Not running, or no status listener: SKIP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lre.cli._checks import Check
from lre.cli._client_files import read_or_empty
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


#: Values of --remote_download_outputs that build without the bytes.
_WITHOUT_BYTES = ("--remote_download_toplevel", "--remote_download_minimal")


def without_the_bytes(repo: Path) -> list[str]:
    """``file:line`` of each active line of the repository's own bazelrc files
    (not lre's) that builds without the bytes."""
    found = []
    for name in (".bazelrc", "user.bazelrc"):
        path = repo / name
        for number, line in enumerate(read_or_empty(path).splitlines(), start=1):
            words = line.split("#", 1)[0].split()
            if any(
                w.startswith(_WITHOUT_BYTES)
                or w in ("--remote_download_outputs=toplevel", "--remote_download_outputs=minimal")
                for w in words[1:]
            ):
                found.append(f"{path}:{number}")
    return found


def bytes_check(repo: Path | None, version: tuple[int, int, int] | None) -> Check:
    """WARN when the repository builds without the bytes on a Bazel that cannot
    recover from a blob gone (before 6.2): Bazel 4.2.3 keeps those references
    for its server's whole life, past the 3 h lre keeps what it told about."""
    if repo is None:
        return Check("without the bytes", "SKIP", "no repository")
    lines = without_the_bytes(repo)
    if not lines:
        return Check(
            "without the bytes", "OK", "the repository's own bazelrc downloads every output"
        )
    if version is not None and version >= (6, 2, 0):
        return Check(
            "without the bytes",
            "OK",
            f"{', '.join(lines)} builds without the bytes; this Bazel reruns a build whose "
            "blobs went (lre's config sets --experimental_remote_cache_eviction_retries)",
        )
    return Check(
        "without the bytes",
        "WARN",
        f"{', '.join(lines)} builds without the bytes, and this Bazel keeps references to "
        "outputs it never downloaded for its server's whole life: once lre drops one (after "
        "eviction_policy.keep_told, or `lre cache gc --force`) builds fail with "
        "'N errors during bulk transfer' until `bazel clean`",
        "remove that flag (lre's config downloads every output), or run `bazel clean` "
        "after `lre cache gc --force`",
    )
