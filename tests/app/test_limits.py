"""global.max_open_files: lre raises its soft open-files limit at start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from lre.worker.usage._descriptors import RESERVE
from tests._support.configs import app_config_text

ROOT = Path(__file__).resolve().parents[2]

#: Runs lre in the foreground with a low soft limit, prints the limits seen
#: once it serves, and stops it.
SERVE = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    from lre.app import run_server
    from tests._support.configs import config_of

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    text = open(sys.argv[1]).read()

    def ready(info):
        print(json.dumps(resource.getrlimit(resource.RLIMIT_NOFILE)), flush=True)
        os.kill(os.getpid(), signal.SIGINT)

    run_server(config_of(text), on_ready=ready)
    """
)


def serve_with(tmp_path: Path, global_extra: str) -> tuple[int, int]:
    text = app_config_text(tmp_path / "lre", extra_global=global_extra)
    (tmp_path / "lre.json5").write_text(text)
    done = subprocess.run(
        [sys.executable, "-c", SERVE, str(tmp_path / "lre.json5")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    soft, hard = json.loads(done.stdout.strip().splitlines()[-1])
    return soft, hard


def test_the_soft_limit_is_raised_to_the_setting(tmp_path: Path) -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Above the 256 lre starts with, below the reserve under any hard limit.
    wanted = 1000 if hard == resource.RLIM_INFINITY else min(1000, hard - RESERVE)
    assert wanted > 256, f"a hard limit of {hard} leaves no room to raise anything"
    soft, _ = serve_with(tmp_path, f", max_open_files: {wanted}")
    assert soft == wanted


def test_the_hard_limit_caps_it_without_failing_start_up(tmp_path: Path) -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    soft, seen_hard = serve_with(tmp_path, f", max_open_files: {hard * 2}")
    assert soft == seen_hard - RESERVE  # the reserve for lre's upkeep stays above
