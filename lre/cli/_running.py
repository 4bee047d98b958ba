"""The lre running for a configuration, as the read-only commands look it up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lre.cli._config_cmd import load_or_default
from lre.cli._daemon import RunningServer, read_pid_file
from lre.config import Config, resolve


@dataclass(frozen=True, slots=True)
class Lookup:
    """The effective (resolved) config, its state directory and the live lre
    recorded there (None when no pid file names a live lre)."""

    config: Config
    state_dir: Path
    server: RunningServer | None


def look_up(config_path: Path | None) -> Lookup:
    """Load ``config_path`` (or the embedded default; exits with status 1 on a
    bad config) and find the lre running with its state directory."""
    config = resolve(load_or_default(config_path))
    state_dir = Path(config.global_.state_dir)
    server = read_pid_file(state_dir)
    return Lookup(config, state_dir, server if server is not None and server.alive() else None)
