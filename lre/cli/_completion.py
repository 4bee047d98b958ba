"""``lre completion SHELL``: print the shell completion script for bash, zsh or fish.

The scripts are typer's: small functions that call ``lre`` back with
``_LRE_COMPLETE`` set, so completion always knows the installed commands and
options. ``lre --install-completion`` (also typer's) writes the script into
the current shell's start-up files instead.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

# typer.completion re-exports this without declaring it, which mypy --strict refuses.
from typer._completion_shared import get_completion_script

from lre.cli._app import app

PROG_NAME = "lre"
COMPLETE_VAR = "_LRE_COMPLETE"


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


INSTALL_HINTS = {
    Shell.bash: "# Load now: source <(lre completion bash); for good: add that line to ~/.bashrc",
    Shell.zsh: "# Load now: source <(lre completion zsh); for good: add that line to ~/.zshrc",
    Shell.fish: "# For good: lre completion fish > ~/.config/fish/completions/lre.fish",
}


@app.command("completion")
def completion(
    shell: Annotated[Shell, typer.Argument(help="The shell to complete in.")],
) -> None:
    """Print the completion script for SHELL (bash, zsh or fish)."""
    script = get_completion_script(
        prog_name=PROG_NAME, complete_var=COMPLETE_VAR, shell=shell.value
    )
    # The hint goes last: zsh wants "#compdef" on the first line of the file.
    typer.echo(script.rstrip("\n"))
    typer.echo(INSTALL_HINTS[shell])
