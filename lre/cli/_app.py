"""The root typer application; command modules register on ``app``.

Each command module (``_config_cmd``, later ``_up``) imports ``app`` from here
and adds its commands; ``lre/cli/__init__.py`` imports every command module so
they are registered before ``main`` runs.
"""

from __future__ import annotations

from typing import Annotated

import typer

import lre

app = typer.Typer(
    name="lre",
    help="Local remote execution: a REAPI server, cache, scheduler and worker for one machine.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    # Plain help (click's): a flag shows no type, every option its default and
    # the environment variable that sets it.
    rich_markup_mode=None,
    epilog=(
        "Environment: LRE_CONFIG names the config file (else ~/.config/lre/config.json5 "
        "when it exists). With the embedded default, LRE_HOME is the one directory of "
        "lre's cache and state; unset, the cache is in $XDG_CACHE_HOME/lre "
        "(~/.cache/lre) and the log and pid file in $XDG_STATE_HOME/lre "
        "(~/.local/state/lre)."
    ),
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"lre {lre.__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Local remote execution for Bazel and Buck2."""


def command_group(name: str, help_text: str, *, runs_alone: bool) -> typer.Typer:
    """A group of subcommands, ``lre NAME ...``, registered on ``app`` with
    plain help. ``runs_alone``: ``lre NAME`` without a subcommand runs the
    group's callback; else it prints the group's help."""
    group = typer.Typer(
        rich_markup_mode=None,
        help=help_text,
        invoke_without_command=runs_alone,
        no_args_is_help=not runs_alone,
        add_completion=False,
    )
    app.add_typer(group, name=name)
    return group
