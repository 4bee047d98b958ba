"""Running ``lre`` as a user does, with a private state directory and free ports."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests._support.configs import app_config_text
from tests._support.servers import free_port
from tests.cli._lre import run_lre


@dataclass(frozen=True)
class LreHome:
    """A config whose every directory is under ``root``, with its own ports."""

    config: Path
    root: Path
    env: dict[str, str]
    grpc_port: int
    status_port: int

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def run(
        self,
        *args: str,
        cwd: Path,
        env: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """``lre ARGS --config <this config>`` (in this home's environment by default)."""
        return run_lre(
            *args,
            "--config",
            str(self.config),
            cwd=cwd,
            env=self.env if env is None else env,
            timeout=timeout,
        )


def private_home(tmp_path: Path, *, max_bytes: str = "1GiB", extra_worker: str = "") -> LreHome:
    root = tmp_path / "lre-root"
    status_port = free_port()
    config = tmp_path / "lre.json5"
    config.write_text(
        app_config_text(
            root, status_port=status_port, extra_worker=extra_worker, cas_bytes=max_bytes
        )
    )
    # COLUMNS: typer's error boxes wrap at the terminal width; keep messages on one line.
    env = {**os.environ, "HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    env.pop("LRE_HOME", None)
    return LreHome(config, root, env, free_port(), status_port)


def bazel_repo(tmp_path: Path, marker: str = "MODULE.bazel") -> Path:
    """An empty Bazel repository ``tmp_path/repo`` (``marker`` names its root)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / marker).write_text("")
    return repo


@contextmanager
def detached(home: LreHome, repo: Path) -> Iterator[subprocess.CompletedProcess[str]]:
    """``lre up --detach`` in ``repo`` on the home's ports; ``lre down`` after."""
    started = home.run("up", "--detach", "--port", str(home.grpc_port), cwd=repo)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield started
    finally:
        down = home.run("down", cwd=repo)
        assert down.returncode == 0, down.stderr
