"""Where the client configs lre wrote send builds, for ``lre doctor``.

``lre up`` writes ``lre.bazelrc`` and ``.buckconfig.d/lre.buckconfig`` (or a
marked block in ``.buckconfig.local``) for the port lre listened on then.
When lre is not running, that port (not the configured one) is what the
repositories' builds will try, so the doctor checks it. Only files lre wrote
count (their "Written by `lre up`" header or lre's marked block); a file that
cannot be read counts as saying nothing.
"""

from __future__ import annotations

from pathlib import Path

from lre.cli._client_files import BEGIN, END, MARKER, OLD_BEGINS, read_or_empty
from lre.cli._doctor_clients import bazelrc_flags


def _bazel_address(repo: Path) -> str | None:
    text = read_or_empty(repo / "lre.bazelrc")
    if not text.startswith(MARKER):
        return None
    executors = [w.split("=", 1)[1] for f, w in bazelrc_flags(text) if f == "remote_executor"]
    return executors[-1] if executors else None


def _buck2_address(path: Path, block_only: bool) -> str | None:
    text = read_or_empty(path)
    if block_only:
        starts = [text.find(begin) for begin in (BEGIN, *OLD_BEGINS) if begin in text]
        if not starts:
            return None
        text = text[min(starts) :].split(END, 1)[0]
    elif not text.startswith(MARKER):
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "engine_address":
            return value.strip()
    return None


def _host_port(address: str) -> str:
    """``grpc://h:p`` -> ``h:p`` (the form lre's listener addresses take)."""
    return address.split("://", 1)[-1]


def written_addresses(repos: list[Path]) -> dict[str, list[Path]]:
    """Listener address (``host:port``) -> the lre-written client config
    files in ``repos`` that send builds there."""
    found: dict[str, list[Path]] = {}
    for repo in dict.fromkeys(repos):
        candidates = [
            (repo / "lre.bazelrc", _bazel_address(repo)),
            (
                repo / ".buckconfig.d" / "lre.buckconfig",
                _buck2_address(repo / ".buckconfig.d" / "lre.buckconfig", block_only=False),
            ),
            (
                repo / ".buckconfig.local",
                _buck2_address(repo / ".buckconfig.local", block_only=True),
            ),
        ]
        for path, address in candidates:
            if address is not None:
                found.setdefault(_host_port(address), []).append(path)
    return found
