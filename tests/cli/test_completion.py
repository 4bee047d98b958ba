"""Shell completion: the printed scripts, and completions they get from lre."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli._lre import run_lre

COMMANDS = {"cache", "completion", "config", "doctor", "down", "logs", "status", "stats", "up"}


def _env_with_lre_on_path(tmp_path: Path) -> dict[str, str]:
    """The scripts call `lre` by name: the console script next to this Python."""
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "lre").exists(), f"no lre console script in {bin_dir} (pip install -e .)"
    return {
        **os.environ,
        "HOME": str(tmp_path),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_scripts_call_lre_back(shell: str, tmp_path: Path) -> None:
    result = run_lre("completion", shell, cwd=tmp_path, env=_env_with_lre_on_path(tmp_path))
    assert result.returncode == 0, result.stderr
    script = result.stdout
    assert script.strip()
    assert f"_LRE_COMPLETE=complete_{shell}" in script
    assert " lre" in script
    if shell == "zsh":
        assert script.startswith("#compdef lre\n")  # usable as a file in $fpath


def test_unknown_shell_is_refused(tmp_path: Path) -> None:
    result = run_lre("completion", "tcsh", cwd=tmp_path, env={**os.environ, "COLUMNS": "300"})
    assert result.returncode == 2
    assert "'tcsh' is not one of 'bash', 'zsh', 'fish'" in result.stderr


def test_bash_completes_lre_commands_and_subcommands(tmp_path: Path) -> None:
    env = _env_with_lre_on_path(tmp_path)
    program = """
source <(lre completion bash)
COMP_WORDS=(lre ""); COMP_CWORD=1; _lre_completion lre; echo "${COMPREPLY[*]}"
COMP_WORDS=(lre ca); COMP_CWORD=1; _lre_completion lre; echo "${COMPREPLY[*]}"
COMP_WORDS=(lre cache ""); COMP_CWORD=2; _lre_completion lre; echo "${COMPREPLY[*]}"
"""
    result = subprocess.run(
        ["bash", "-c", program], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    every, prefix, sub = result.stdout.splitlines()
    assert set(every.split()) >= COMMANDS
    assert prefix.split() == ["cache"]
    assert set(sub.split()) == {"clean", "gc"}


@pytest.mark.parametrize(
    ("shell", "extra"),
    [("zsh", {}), ("fish", {"_TYPER_COMPLETE_FISH_ACTION": "get-args"})],
)
def test_zsh_and_fish_get_lre_commands(shell: str, extra: dict[str, str], tmp_path: Path) -> None:
    # What the zsh and fish scripts run on <TAB> (neither shell is installed here).
    env = {
        **_env_with_lre_on_path(tmp_path),
        "_LRE_COMPLETE": f"complete_{shell}",
        "_TYPER_COMPLETE_ARGS": "lre ",
        **extra,
    }
    result = subprocess.run(
        ["lre"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    for command in COMMANDS:
        assert command in result.stdout, (command, result.stdout)
