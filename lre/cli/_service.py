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

from lre.cli._app import app

service_app = typer.Typer(
    rich_markup_mode=None,
    name="service",
    help="Start lre with your session (a systemd user unit).",
    no_args_is_help=True,
)
app.add_typer(service_app)

UNIT_NAME = "lre.service"
#: First line of a unit lre wrote (``uninstall`` removes only such a file).
UNIT_MARKER = "# Written by `lre service install`; `lre service uninstall` removes it."


def _quote(arg: str) -> str:
    """One ExecStart word: systemd's quoting is close to the shell's; ``%``
    starts a specifier and is doubled."""
    return shlex.quote(arg).replace("%", "%%")


def unit_text(config: Path | None, python: str = sys.executable) -> str:
    """The unit running ``python -m lre up --no-tui`` (with ``--config`` when given).

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


@service_app.command("unit")
def show_unit(config_path: ServiceConfigOption = None) -> None:
    """Print the systemd user unit `lre service install` writes."""
    try:
        typer.echo(unit_text(config_path.resolve() if config_path else None), nl=False)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--config") from None


@service_app.command("install")
def install(config_path: ServiceConfigOption = None) -> None:
    """Write the systemd user unit and say how to enable it (it is not started)."""
    path = unit_path()
    if path.exists() and not path.read_text(encoding="utf-8").startswith(UNIT_MARKER):
        typer.echo(f"error: {path} exists and was not written by lre; not overwriting it", err=True)
        raise typer.Exit(1)
    text = unit_text(config_path.resolve() if config_path else None)
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
