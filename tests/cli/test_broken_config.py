"""A config file broken while lre runs never locks the user out of the running lre.

The user's ``~/.config/lre/config.json5`` gets a typo after ``lre up``:
``status``, ``ps``, ``logs``, ``builds``, ``doctor`` and ``down`` still
reach the running lre (through the embedded default's state directory,
which that file does not move), each warning once; ``doctor`` reports the
config as a FAIL naming file:line; ``lre config check`` says how to recover.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests._support.servers import free_port
from tests.cli._lre import run_lre
from tests.cli.running_lre import bazel_repo


def test_a_typo_in_the_config_file_while_lre_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = home / ".config" / "lre" / "config.json5"
    config.parent.mkdir(parents=True)
    status_port = free_port()
    config.write_text(
        f'{{\n  global: {{\n    status: {{ address: "127.0.0.1:{status_port}" }},\n  }},\n}}\n'
    )
    env = {**os.environ, "HOME": str(home), "COLUMNS": "200"}
    for name in ("LRE_HOME", "LRE_CONFIG", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env.pop(name, None)
    repo = bazel_repo(tmp_path)
    up = run_lre("up", "--detach", "--port", str(free_port()), cwd=repo, env=env)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        config.write_text(
            f'{{\n  global: {{\n    status: {{ adress: "127.0.0.1:{status_port}" }},\n  }},\n}}\n'
        )
        where = f"{config}:3"

        status = run_lre("status", cwd=repo, env=env)
        assert status.returncode == 0, status.stdout + status.stderr
        assert status.stdout.startswith("lre is running: healthy"), status.stdout
        assert "warning: the config does not load" in status.stderr
        assert where in status.stderr, status.stderr

        ps = run_lre("ps", cwd=repo, env=env)
        assert ps.returncode == 0 and len(ps.stdout.splitlines()) == 2, ps.stdout + ps.stderr
        logs = run_lre("logs", "--tail", "5", cwd=repo, env=env)
        assert logs.returncode == 0 and logs.stdout.strip(), logs.stdout + logs.stderr
        builds = run_lre("builds", cwd=repo, env=env)
        assert builds.returncode == 0, builds.stdout + builds.stderr

        doctor = run_lre("doctor", cwd=repo, env=env, timeout=600)
        assert doctor.returncode == 1, doctor.stdout + doctor.stderr
        row = next(ln for ln in doctor.stdout.splitlines() if ln.split()[1:2] == ["config"])
        assert row.startswith("FAIL") and where in row, doctor.stdout

        check = run_lre("config", "check", str(config), cwd=repo, env=env)
        assert check.returncode == 1
        assert where in check.stderr
        assert "lre keeps running with the config it started with" in check.stderr
        assert "`lre restart` applies the fixed file" in check.stderr

        down = run_lre("down", cwd=repo, env=env)
        assert down.returncode == 0, down.stdout + down.stderr
        assert "stopped" in down.stdout
        assert f"{repo}: builds locally now" in down.stdout
        # With lre stopped, the advice says so instead of "keeps running".
        config.write_text("{\n  global: { nope: 1 },\n}\n")
        stopped = run_lre("config", "check", str(config), cwd=repo, env=env)
        assert stopped.returncode == 1
        assert f"{config}:2" in stopped.stderr, stopped.stderr
        assert "keeps running" not in stopped.stderr, stopped.stderr
        assert "No lre runs from the embedded default" in stopped.stderr
        assert "then `lre up` starts lre with it" in stopped.stderr
    finally:
        config.write_text("{}\n")
        run_lre("down", "--now", cwd=repo, env=env)
