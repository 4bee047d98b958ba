"""``lre config show`` and ``lre config check``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lre.cli._app import app
from lre.config import (
    DEFAULT_SOURCE,
    Config,
    ConfigError,
    default_config,
    dump_config,
    load_config,
    resolve,
)

config_app = typer.Typer(
    help="Show or check lre's configuration.", no_args_is_help=True, add_completion=False
)
app.add_typer(config_app, name="config")


def load_or_default(path: Path | None) -> Config:
    """The config at ``path``, or the embedded default when ``path`` is None.

    Prints every problem to stderr and exits with status 1 when it is invalid.
    """
    try:
        return load_config(path) if path is not None else default_config()
    except ConfigError as error:
        for message in error.messages:
            typer.echo(message, err=True)
        raise typer.Exit(1) from error


@config_app.command("show")
def show(
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Config file (default: the embedded default)."),
    ] = None,
) -> None:
    """Print the effective config as JSON5, defaults filled and "auto" resolved."""
    loaded = load_or_default(config)
    source = str(config) if config is not None else DEFAULT_SOURCE
    typer.echo(f'// lre effective config from {source}; "auto" values resolved on this host')
    typer.echo(dump_config(resolve(loaded)), nl=False)


@config_app.command("check")
def check(
    file: Annotated[Path, typer.Argument(help="Config file to validate.")],
) -> None:
    """Validate FILE: print "ok", or every problem and exit with status 1."""
    load_or_default(file)
    typer.echo("ok")
