"""``lre service``: start lre with the user's session, as a systemd user unit.

``lre service unit`` prints the unit, ``lre service install`` writes it to
``$XDG_CONFIG_HOME/systemd/user/lre.service`` (default ``~/.config``) and
says the ``systemctl --user`` commands that enable it; ``lre service
uninstall`` removes it (only a unit lre wrote). The unit runs the foreground
``lre up --no-tui`` with this installation's Python (so a venv or pipx
install keeps working), logs to the journal and to lre's log file, and
stops lre with SIGTERM, which drains nothing but makes every linked
repository's client config inert, as ``lre down --now`` does.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from lre.cli._app import command_group

service_app = command_group(
    "service", "Start lre with your session (a systemd user unit).", runs_alone=False
)

UNIT_NAME = "lre.service"
#: First line of a unit lre wrote (``uninstall`` removes only such a file).
UNIT_MARKER = "# Written by `lre service install`; `lre service uninstall` removes it."


def _quote(arg: str) -> str:
    """One ExecStart word: systemd's quoting is close to the shell's; ``%``
    starts a specifier and is doubled."""
    return shlex.quote(arg).replace("%", "%%")


def unit_text(config: Path | None, python: str = sys.executable, open_files: int = 24576) -> str:
    """The unit running ``python -m lre up --no-tui`` (with ``--config`` when given),
    with ``LimitNOFILE=open_files`` (the config's ``global.max_open_files``: a
    session's hard limit is often lower, and lre would warn at every start).

    Raises ``ValueError`` when ``config`` is not an absolute path.
    """
    argv = [python, "-m", "lre", "up", "--no-tui"]
    if config is not None:
        if not config.is_absolute():
            raise ValueError(f"--config {config}: the unit needs an absolute path")
        argv += ["--config", str(config)]
    return "\n".join(
        [
            UNIT_MARKER,
            "[Unit]",
            "Description=lre: local remote execution for Bazel and Buck2",
            "",
            "[Service]",
            "Type=simple",
            f"ExecStart={' '.join(_quote(a) for a in argv)}",
            # A directory with no repository above it: the unit links no
            # repository by itself, it serves those linked before.
            "WorkingDirectory=/",
            f"LimitNOFILE={open_files}",
            "Restart=on-failure",
            "RestartSec=5",
            # SIGTERM: lre cancels its actions and makes client configs inert.
            "KillSignal=SIGTERM",
            "TimeoutStopSec=60",
            "",
            "[Install]",
            "WantedBy=default.target",
            "",
        ]
    )


def unit_path() -> Path:
    """``$XDG_CONFIG_HOME/systemd/user/lre.service`` (``~/.config`` by default)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user" / UNIT_NAME


ServiceConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Config file the unit passes to `lre up`."),
]


def _unit_for(config_path: Path | None) -> str:
    """``unit_text`` for ``config_path`` (its ``max_open_files``); a bad path is
    typer's usage error, a config that does not load exits 1 with its problems."""
    from lre.cli._config_cmd import load_or_default

    open_files = load_or_default(config_path).global_.max_open_files
    try:
        return unit_text(config_path.resolve() if config_path else None, open_files=open_files)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--config") from None


@service_app.command("unit")
def show_unit(config_path: ServiceConfigOption = None) -> None:
    """Print the systemd user unit `lre service install` writes."""
    typer.echo(_unit_for(config_path), nl=False)


@service_app.command("install")
def install(config_path: ServiceConfigOption = None) -> None:
    """Write the systemd user unit and say how to enable it (it is not started)."""
    path = unit_path()
    if path.exists() and not path.read_text(encoding="utf-8").startswith(UNIT_MARKER):
        typer.echo(f"error: {path} exists and was not written by lre; not overwriting it", err=True)
        raise typer.Exit(1)
    text = _unit_for(config_path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        typer.echo(f"error: cannot write {path}: {error.strerror or error}", err=True)
        raise typer.Exit(1) from error
    typer.echo(f"wrote {path}")
    typer.echo(
        "enable and start it: systemctl --user daemon-reload && systemctl --user enable --now lre"
    )
    typer.echo("its log: journalctl --user -u lre (or `lre logs`)")
    from lre.cli._running import look_up

    running = look_up(config_path).server
    if running is not None:
        typer.echo(
            f"note: an lre started by hand runs now (pid {running.pid}, {running.grpc_address}): "
            "`lre down` before enabling the unit, or the unit's lre finds the state "
            "directory and port taken",
            err=True,
        )


@service_app.command("uninstall")
def uninstall() -> None:
    """Remove the unit `lre service install` wrote.

    Stop it first: `systemctl --user disable --now lre`.
    """
    path = unit_path()
    if not path.exists():
        typer.echo(f"no unit at {path}")
        return
    if not path.read_text(encoding="utf-8").startswith(UNIT_MARKER):
        typer.echo(f"error: {path} was not written by lre; leaving it", err=True)
        raise typer.Exit(1)
    path.unlink()
    typer.echo(f"removed {path}")
    typer.echo("then: systemctl --user daemon-reload")
