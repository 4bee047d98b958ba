"""lre's own files that name the user's paths and commands are owner-only (0600)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests._support.servers import free_port
from tests.cli._lre import bazel_repo_with_config, run_lre


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_lre_up_creates_its_log_and_database_owner_only(tmp_path: Path) -> None:
    repo, config, env = bazel_repo_with_config(tmp_path)
    state = tmp_path / "lre-root" / "state"
    # The default umask would give 0644; lre must not depend on the user's.
    old_umask = os.umask(0o022)
    try:
        started = run_lre(
            "up",
            "--detach",
            "--config",
            str(config),
            "--port",
            str(free_port()),
            cwd=repo,
            env=env,
        )
    finally:
        os.umask(old_umask)
    try:
        assert started.returncode == 0, started.stderr
        assert _mode(state / "lre.log") == 0o600
        assert _mode(state / "learned-reservations.sqlite3") == 0o600
    finally:
        down = run_lre("down", "--config", str(config), cwd=repo, env=env)
    assert down.returncode == 0, down.stderr
