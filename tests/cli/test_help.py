"""`lre ... --help` as a user reads it: flags without a type tag, each
option's default, the environment variable that sets it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.cli._lre import run_lre

#: One command of each kind: the root, a command with many knobs, a group,
#: a read-only command, one with a value option that has no default.
COMMANDS = [(), ("up",), ("cache",), ("doctor",), ("logs",), ("top",), ("history",)]


def _help(tmp_path: Path, *command: str) -> str:
    env = {**os.environ, "HOME": str(tmp_path)}
    shown = run_lre(*command, "--help", cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def _options(text: str) -> dict[str, str]:
    """Option (its long name) -> its line of help, from click's plain help."""
    section = text.split("Options:\n", 1)[1].split("\n\n", 1)[0]
    rows: dict[str, str] = {}
    name = ""
    for line in section.splitlines():
        if line.lstrip().startswith("-"):  # "  -c, --config <path>  help..."
            column = line.strip().split("  ", 1)[0]
            name = re.findall(r"--[\w-]+", column)[0]
            rows[name] = line.strip()
        else:  # the help wrapped onto the next line
            rows[name] += " " + line.strip()
    return rows


def test_flags_carry_no_type_and_values_show_their_default(tmp_path: Path) -> None:
    for command in COMMANDS:
        text = _help(tmp_path, *command)
        assert "<bool>" not in text, (command, text)
        for name, line in _options(text).items():
            if re.search(r"--[\w-]+ <", line):  # takes a value
                assert "default: " in line, (command, name, line)


def test_config_names_its_environment_variable_and_default(tmp_path: Path) -> None:
    for command in (("up",), ("cache",), ("doctor",), ("link",), ("history",), ("top",)):
        line = _options(_help(tmp_path, *command))["--config"]
        assert "env var: LRE_CONFIG" in line, (command, line)
        assert "default: (~/.config/lre/config.json5 when it exists" in line, (command, line)
    root = _help(tmp_path)
    assert "LRE_HOME" in root and "LRE_CONFIG" in root


def test_lre_config_naming_no_file_is_still_one_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "LRE_CONFIG": str(tmp_path / "nope.json5")}
    shown = run_lre("config", "show", cwd=tmp_path, env=env)
    assert shown.returncode == 1
    assert (
        shown.stderr.strip() == f"error: LRE_CONFIG={tmp_path / 'nope.json5'}: no such config file"
    )
