"""Running the ``lre`` command line as a user does, from tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_lre(
    *args: str, cwd: Path, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m lre ARGS`` in ``cwd``; output captured as text, never raises on exit status."""
    return subprocess.run(
        [sys.executable, "-m", "lre", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def bazel_repo_with_config(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A new Bazel repository (``tmp_path/repo``, with ``MODULE.bazel``), a
    small lre config with every directory under ``tmp_path/lre-root``, and an
    environment whose HOME is inside ``tmp_path``: (repo, config, env)."""
    from tests._support.configs import app_config_text

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "MODULE.bazel").write_text("")
    config = tmp_path / "lre.json5"
    config.write_text(app_config_text(tmp_path / "lre-root"))
    return repo, config, {**os.environ, "HOME": str(tmp_path / "home")}
