"""The lre running for a configuration, as the read-only commands look it up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lre.cli._config_cmd import fallback_warning, load_or_fallback
from lre.cli._daemon import RunningServer, read_pid_file
from lre.config import Config, resolve, state_dir_of


@dataclass(frozen=True, slots=True)
class Lookup:
    """The effective (resolved) config, its state directory and the live lre
    recorded there (None when no pid file names a live lre)."""

    config: Config
    state_dir: Path
    server: RunningServer | None
    #: Problems of a config file that does not load (then ``config`` is the
    #: embedded default); empty when it loads.
    config_problems: tuple[str, ...] = ()


def look_up(config_path: Path | None) -> Lookup:
    """Load ``config_path`` (or the embedded default; exits with status 1 on a
    bad config) and find the lre running with its state directory."""
    loaded, problems = load_or_fallback(config_path)
    if problems:
        fallback_warning(problems)
    config = resolve(loaded)
    state_dir = state_dir_of(config)
    server = read_pid_file(state_dir)
    alive = server if server is not None and server.alive() else None
    return Lookup(config, state_dir, alive, tuple(problems))
