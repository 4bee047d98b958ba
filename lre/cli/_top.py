"""``lre top`` (the live dashboard of a running lre) and ``lre stats`` (one snapshot).

Both read ``/api/v1/stats`` from the status listener at ``--address``,
default the running lre's status listener (from its pid file), else
``global.status.address`` of the effective config (``--config`` or
the embedded default). ``q`` or Ctrl-C leaves ``lre top``; the server keeps
running.

The dashboard's modules (``lre.tui``, ``lre.snapshot``, Trio, rich) are
imported when one of these commands runs, not when the command line starts:
importing them takes a while, which every other ``lre`` command would pay.
Neither command imports the server (``lre.app``, ``lre.service``,
``lre.scheduler``, ``lre.worker``, gRPC): they only read a snapshot over HTTP.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lre.cli._app import app
from lre.cli._config_cmd import config_option, load_or_default
from lre.cli._daemon import read_pid_file
from lre.cli._running import look_up
from lre.config import resolve, state_dir_of

if TYPE_CHECKING:
    from lre.snapshot import ProcessSnapshot
    from lre.tui import RemoteSnapshots

AddressOption = Annotated[
    str | None,
    typer.Option(
        "--address",
        "-a",
        help="Status listener of the running lre (host:port).",
        show_default="the config's global.status.address, 127.0.0.1:50061",
    ),
]
ConfigOption = Annotated[
    Path | None,
    config_option("Config whose global.status.address to use."),
]


def status_address(address: str | None, config: Path | None) -> str:
    """``address`` if given, else where the running lre's status listener is
    (its pid file: ``--port`` moves the listener), else the config's
    ``global.status.address``.

    Exits with status 2 and a message when the listener is disabled there.
    """
    if address:
        return address
    loaded = load_or_default(config)
    running = read_pid_file(state_dir_of(resolve(loaded)))
    if running is not None and running.status_address and running.alive():
        return running.status_address
    configured = loaded.global_.status.address
    if not configured:
        typer.echo(
            'global.status.address is "" (status listener disabled); pass --address host:port',
            err=True,
        )
        raise typer.Exit(2)
    return configured


class _SaysWhenStopped:
    """Snapshots from ``source``; when none comes and the lre recorded in
    ``state_dir`` is not alive, the error says lre is not running (not a raw
    connection error)."""

    def __init__(self, source: RemoteSnapshots, state_dir: Path) -> None:
        self.source = source
        self.state_dir = state_dir

    async def __call__(self) -> ProcessSnapshot:
        try:
            return await self.source()
        except OSError:
            server = read_pid_file(self.state_dir)
            if server is None or not server.alive():
                raise OSError(
                    "lre is not running (`lre up --detach` starts it; q leaves)"
                ) from None
            raise


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
    state_dir = None if address else state_dir_of(resolve(load_or_default(config)))
    getter = source if state_dir is None else _SaysWhenStopped(source, state_dir)
    try:
        trio.run(
            lambda: run_dashboard(getter, refresh_per_second=refresh, quit_keys=True, screen=True)
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
    zero: Annotated[
        bool,
        typer.Option("--zero", help="Reset the cache hit counts (kept across restarts) and exit."),
    ] = False,
) -> None:
    """Print one snapshot of a running lre (the dashboard as text, or --json).

    Exits with status 1 when lre cannot be reached or answers badly.
    """
    if zero:
        _zero_hits(config)
        return
    from rich.console import Console

    from lre.snapshot import ProcessSnapshot
    from lre.tui import fetch_snapshot_json, render_dashboard

    if address is None:
        lookup = look_up(config)
        if lookup.server is None:
            typer.echo(
                f"lre is not running (no live lre recorded in {lookup.state_dir}); "
                "`lre up --detach` starts it",
                err=True,
            )
            raise typer.Exit(1)
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
    console.print(render_dashboard(snapshot, width=console.width, keys=()))


def _zero_hits(config: Path | None) -> None:
    """``lre stats --zero``: through the running lre (its admin route), else by
    removing the saved counts from the state directory."""
    from lre.cli._cache_cmd import admin_post
    from lre.config import HITS_FILE

    lookup = look_up(config)
    if admin_post(lookup, "/api/v1/stats/zero", "") is not None:
        typer.echo("cache hit counts reset (through the running lre)")
        return
    (lookup.state_dir / HITS_FILE).unlink(missing_ok=True)
    typer.echo("cache hit counts reset")
