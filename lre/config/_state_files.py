"""lre's state directory (``global.state_dir``) and the names of the files it
keeps there, shared by the server, which writes them, and the CLI, which
reads them."""

from __future__ import annotations

from pathlib import Path

from lre.config._models import Config

#: The bearer token of the status listener's POST routes (mode 0600).
ADMIN_TOKEN_FILE = "admin.token"
#: Client-visible hit counts kept across restarts (``lre stats --zero``).
HITS_FILE = "hits.json"


def state_dir_of(config: Config) -> Path:
    """lre's own state directory for ``config`` (pid file, logs, learned data)."""
    return Path(config.global_.state_dir)
