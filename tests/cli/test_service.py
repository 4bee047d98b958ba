"""``lre service``: the systemd user unit, checked by systemd itself (not started)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli._lre import run_lre
from tests.cli.running_lre import bazel_repo, detached, private_home


def _systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        message = "systemd-analyze is not installed (Debian: apt-get install systemd)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def test_install_writes_a_unit_systemd_accepts_and_uninstall_removes_it(tmp_path: Path) -> None:
    analyze = _systemd_analyze()
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    config = tmp_path / "my lre%.json5"  # a space and a specifier character, quoted right
    config.write_text("{}\n")
    installed = run_lre("service", "install", "--config", str(config), cwd=tmp_path, env=env)
    assert installed.returncode == 0, installed.stderr
    unit = tmp_path / "xdg" / "systemd" / "user" / "lre.service"
    assert f"wrote {unit}" in installed.stdout
    assert "systemctl --user enable --now lre" in installed.stdout
    text = unit.read_text()
    assert "-m lre up --no-tui --config" in text
    assert "\nLimitNOFILE=24576\n" in text  # the config's global.max_open_files
    verify = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=120, check=False
    )
    # systemd-analyze exits 0 on unknown keys too: its warnings go to stderr.
    assert verify.returncode == 0 and verify.stderr.strip() == "", verify.stderr
    printed = run_lre("service", "unit", "--config", str(config), cwd=tmp_path, env=env)
    assert printed.stdout == text

    unit.write_text("[Unit]\nDescription=mine\n")
    refused = run_lre("service", "install", cwd=tmp_path, env=env)
    assert refused.returncode == 1 and "was not written by lre" in refused.stderr
    assert run_lre("service", "uninstall", cwd=tmp_path, env=env).returncode == 1
    assert unit.read_text() == "[Unit]\nDescription=mine\n"
    unit.unlink()
    assert run_lre("service", "install", cwd=tmp_path, env=env).returncode == 0
    removed = run_lre("service", "uninstall", cwd=tmp_path, env=env)
    assert removed.returncode == 0 and f"removed {unit}" in removed.stdout
    assert not unit.exists()


def test_install_says_an_lre_started_by_hand_runs(tmp_path: Path) -> None:
    home = private_home(tmp_path)
    repo = bazel_repo(tmp_path)
    env = {**home.env, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    with detached(home, repo):
        installed = run_lre(
            "service", "install", "--config", str(home.config), cwd=tmp_path, env=env
        )
        assert installed.returncode == 0, installed.stderr
        assert "note: an lre started by hand runs now" in installed.stderr
        assert "`lre down` before enabling the unit" in installed.stderr
