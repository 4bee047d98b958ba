"""``lre config show`` and ``lre config check``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from lre.cli._app import command_group
from lre.config import (
    CONFIG_ENV,
    DEFAULT_SOURCE,
    Config,
    ConfigError,
    default_config,
    dump_config,
    find_config_file,
    format_path,
    load_config,
    resolve,
    state_dir_of,
    value_origins,
)

config_app = command_group("config", "Show or check lre's configuration.", runs_alone=False)


CONFIG_HELP = "Config file, merged over the embedded default."

#: What ``--config`` means when neither it nor ``$LRE_CONFIG`` is given.
CONFIG_DEFAULT = "~/.config/lre/config.json5 when it exists, else the embedded default alone"


def config_option(help_text: str = CONFIG_HELP) -> Any:
    """The ``--config``/``-c`` option of every command that reads lre's
    config: set by ``$LRE_CONFIG`` too (help says so, and the default)."""
    return typer.Option(
        "--config",
        "-c",
        help=help_text,
        envvar=CONFIG_ENV,
        show_envvar=True,
        show_default=CONFIG_DEFAULT,
    )


def config_file(path: Path | None) -> Path | None:
    """The config file in effect: ``path`` (``--config``), else ``$LRE_CONFIG``,
    else ``~/.config/lre/config.json5`` when it exists; None = the embedded
    default alone. Exits with status 1 when ``$LRE_CONFIG`` names no file."""
    if path is not None:
        named = os.environ.get(CONFIG_ENV, "")
        if named and Path(named) == path and not path.is_file():
            typer.echo(f"error: {CONFIG_ENV}={named}: no such config file", err=True)
            raise typer.Exit(1)
        return path
    try:
        return find_config_file()
    except ConfigError as error:
        for message in error.messages:
            typer.echo(f"error: {message}", err=True)
        raise typer.Exit(1) from error


def load_or_default(path: Path | None) -> Config:
    """The config file in effect (``config_file``) merged over the embedded
    default, or the default alone when there is none.

    Prints every problem to stderr and exits with status 1 when it is invalid.
    """
    found = config_file(path)
    try:
        return load_config(found) if found is not None else default_config()
    except ConfigError as error:
        for message in error.messages:
            typer.echo(message, err=True)
        raise typer.Exit(1) from error


#: How to get out of a config that does not load, said by ``config check`` and the
#: commands that fall back to the embedded default.
RECOVER = (
    "lre keeps running with the config it started with; `lre status`, `ps`, `down`, "
    "`logs`, `builds` and `doctor` still reach it (through the embedded default's state "
    "directory). Fix the lines named above until `lre config check FILE` passes; "
    "`lre restart` applies the fixed file."
)


def _recovery() -> str:
    """``RECOVER`` when an lre runs from the state directory the commands
    fall back to (the embedded default's); else how to go on with none
    running (no claim about an lre that is not there)."""
    from lre.cli._daemon import read_pid_file

    state_dir = state_dir_of(resolve(default_config()))
    server = read_pid_file(state_dir)
    if server is not None and server.alive():
        return RECOVER
    return (
        "No lre runs from the embedded default's state directory (which lre's commands "
        "fall back to while the file does not load). Fix the lines named above until `lre config "
        "check FILE` passes; then `lre up` starts lre with it."
    )


def load_or_fallback(path: Path | None) -> tuple[Config, list[str]]:
    """(config, problems): the config in effect as ``load_or_default`` loads it,
    or, when that file does not load, the embedded default alone with every
    problem (``file:line: ...``). For the commands that must reach a running
    lre whatever its file now says; they warn with ``fallback_warning``.
    Exits with status 1 only when ``$LRE_CONFIG`` names no file."""
    found = config_file(path)
    try:
        return (load_config(found) if found is not None else default_config()), []
    except ConfigError as error:
        return default_config(), list(error.messages)


def fallback_warning(problems: list[str]) -> None:
    """Say on stderr that the config file does not load and what lre uses instead."""
    typer.echo(
        f"warning: the config does not load ({len(problems)} problem(s), first: "
        f"{problems[0]}); using the embedded default's state directory "
        "(`lre config check FILE` lists them all)",
        err=True,
    )


@config_app.command("show")
def show(
    config: Annotated[
        Path | None,
        config_option(),
    ] = None,
    origin: Annotated[
        bool,
        typer.Option(
            "--origin",
            help="One line per value, saying where it came from (the file, the embedded "
            "default or the built-in default).",
        ),
    ] = False,
) -> None:
    """Print the effective config as JSON5, defaults filled and "auto" resolved.

    While lre runs (for this config's state directory), the config it runs
    with: "auto" as it resolved it at its start, its flags applied."""
    loaded = load_or_default(config)
    found = config_file(config)
    source = f"{found} over {DEFAULT_SOURCE}" if found is not None else DEFAULT_SOURCE
    resolved = resolve(loaded)
    text = dump_config(resolved)
    if origin:
        _print_origins(text, found)
        return
    running = _running_effective(state_dir_of(resolved))
    if running is not None:
        typer.echo(running, nl=False)
        return
    typer.echo(f'// lre effective config from {source}; "auto" values resolved on this host')
    typer.echo(text, nl=False)


def _running_effective(state_dir: Path) -> str | None:
    """The config the lre running for ``state_dir`` recorded at its start, with a
    header saying so; None when none runs or it recorded none."""
    from lre.cli._daemon import read_pid_file
    from lre.cli._start_settings import EFFECTIVE_FILE

    server = read_pid_file(state_dir)
    if server is None or not server.alive():
        return None
    try:
        text = (state_dir / EFFECTIVE_FILE).read_text(encoding="utf-8")
    except OSError:
        return None
    return (
        f'// the config lre (pid {server.pid}) runs with: "auto" as it resolved it at '
        "its start, its flags applied (`lre restart` reads the file again)\n" + text
    )


def _leaves(value: Any, at: tuple[str | int, ...]) -> list[tuple[tuple[str | int, ...], Any]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, (*at, key))]
    if isinstance(value, list) and value:
        return [leaf for i, item in enumerate(value) for leaf in _leaves(item, (*at, i))]
    return [(at, value)]


def _print_origins(text: str, found: Path | None) -> None:
    """One line per effective value: ``path = value  # where it came from``."""
    import json5

    try:
        origins = value_origins(found)
    except ConfigError as error:
        for message in error.messages:
            typer.echo(message, err=True)
        raise typer.Exit(1) from error
    for path, value in _leaves(json5.loads(text), ()):
        where = origins.get(path, "built-in default")
        typer.echo(f"{format_path(path)} = {json.dumps(value)}  # {where}")


@config_app.command("check")
def check(
    file: Annotated[Path, typer.Argument(help="Config file to validate.")],
) -> None:
    """Validate FILE: print "ok", or every problem and how to recover (exit status 1)."""
    config_file(file)
    try:
        load_config(file)
    except ConfigError as error:
        for message in error.messages:
            typer.echo(message, err=True)
        typer.echo(_recovery(), err=True)
        raise typer.Exit(1) from error
    typer.echo("ok")
