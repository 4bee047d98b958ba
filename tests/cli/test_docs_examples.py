"""The `lre config check` session shown in docs/troubleshooting.md is what the
command prints for the file shown there."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.cli._lre import run_lre

DOC = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"


def test_troubleshooting_config_check_example_is_real_output(tmp_path: Path) -> None:
    text = DOC.read_text()
    match = re.search(r"```\n\$ cat (\S+)\n(.*?)\$ lre config check (\S+)\n(.*?)```", text, re.S)
    assert match is not None, "docs/troubleshooting.md: the config check example is gone"
    name, body, checked, shown = match.groups()
    assert checked == name
    (tmp_path / name).write_text(body)
    env = {**os.environ, "HOME": str(tmp_path / "home")}  # no lre runs from its state dir
    env.pop("LRE_HOME", None)
    result = run_lre("config", "check", name, cwd=tmp_path, env=env)
    assert result.returncode == 1
    assert result.stdout + result.stderr == shown
