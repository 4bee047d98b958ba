"""``lre top`` (the live dashboard of a running lre) and ``lre stats`` (one snapshot).

Both read ``/api/v1/stats`` from the status listener at ``--address``,
default ``global.status.address`` of the effective config (``--config`` or
the embedded default). ``q`` or Ctrl-C leaves ``lre top``; the server keeps
running.

The dashboard's modules (``lre.tui``, ``lre.app``, Trio, rich) are imported
when one of these commands runs, not when the command line starts: importing
them takes about a second, which every other ``lre`` command would pay.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from lre.cli._app import app
from lre.cli._config_cmd import load_or_default

AddressOption = Annotated[
    str | None,
    typer.Option(
        "--address",
        "-a",
        help="Status listener of the running lre (host:port; default: global.status.address).",
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Config whose global.status.address to use."),
]


def status_address(address: str | None, config: Path | None) -> str:
    """``address`` if given, else the config's ``global.status.address``.

    Exits with status 2 and a message when the listener is disabled there.
    """
    if address:
        return address
    configured = load_or_default(config).global_.status.address
    if not configured:
        typer.echo(
            'global.status.address is "" (status listener disabled); pass --address host:port',
            err=True,
        )
        raise typer.Exit(2)
    return configured


@app.command("top")
def top(
    address: AddressOption = None,
    config: ConfigOption = None,
    refresh: Annotated[
        float, typer.Option("--refresh", help="Refreshes per second.", min=0.2, max=20)
    ] = 4.0,
) -> None:
    """Live dashboard of a running lre; q or Ctrl-C leaves (the server keeps running)."""
    import trio

    from lre.tui import RemoteSnapshots, run_dashboard

    target = status_address(address, config)
    if not sys.stdout.isatty():
        typer.echo("lre top needs a terminal; use `lre stats --json` in scripts", err=True)
        raise typer.Exit(2)
    try:
        source = RemoteSnapshots(target)
    except ValueError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(2) from error
    try:
        trio.run(
            lambda: run_dashboard(source, refresh_per_second=refresh, quit_keys=True, screen=True)
        )
    except KeyboardInterrupt:
        pass


@app.command("stats")
def stats(
    address: AddressOption = None,
    config: ConfigOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the snapshot as JSON (for scripts).")
    ] = False,
) -> None:
    """Print one snapshot of a running lre (the dashboard as text, or --json).

    Exits with status 1 when lre cannot be reached or answers badly.
    """
    from rich.console import Console

    from lre.app._snapshot import ProcessSnapshot
    from lre.tui import fetch_snapshot_json, render_dashboard

    target = status_address(address, config)
    try:
        data = fetch_snapshot_json(target)
        snapshot = ProcessSnapshot.from_json(data)
    except (OSError, ValueError) as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from error
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    console = Console()
    console.print(render_dashboard(snapshot, width=console.width))
