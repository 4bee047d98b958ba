"""``lre service``: the systemd user unit, checked by systemd itself (not started)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli._lre import run_lre


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
