"""``lre down``/``stop``, ``start``, ``restart``, ``status`` and ``ps``: the lifecycle
of a detached lre, as docker compose and LSB init scripts name it.

``down`` (alias ``stop``) waits for the actions lre is running or has
queued to finish before it stops lre (``--now`` cancels them; ``--timeout``
bounds the wait, after which they are cancelled), then leaves every linked
repository building locally. ``start`` is ``up --detach``; ``restart`` is
``down`` then ``start`` on the port lre had. ``status`` exits 0 when lre runs
and is healthy, 2 when it runs unhealthy and 3 when it does not run (LSB);
``ps`` lists the running lre in one table row.
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer

from lre.cli._app import app
from lre.cli._daemon import RunningServer, read_pid_file, remove_pid_file, stop_server
from lre.cli._knobs import Knobs
from lre.cli._links import read_links
from lre.cli._ports import split_address
from lre.cli._running import look_up
from lre.cli._start_settings import StartSettings, last_start
from lre.cli._up import ConfigOption, make_repos_inert, up

#: Exit status of ``lre status`` when lre is not running (LSB "program is not running").
NOT_RUNNING = 3
#: Seconds between looks at /status while ``down`` drains.
DRAIN_POLL_S = 0.5


def fetch_status(server: RunningServer) -> tuple[int, dict[str, Any] | None, str]:
    """(HTTP status, the /status JSON, a problem) of ``server``; (0, None, why)
    when its status listener is off or does not answer."""
    if not server.status_address:
        return 0, None, "its status listener is disabled"
    url = f"http://{server.status_address}/status"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            code, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        code, raw = error.code, error.read()
    except OSError as error:
        return 0, None, f"/status does not answer: {error}"
    try:
        body = json.loads(raw)
    except ValueError:
        return code, None, f"/status answered {code} with no JSON"
    return code, body if isinstance(body, dict) else None, ""


def _in_flight(server: RunningServer) -> tuple[int, int] | None:
    """(running, queued) actions of ``server``; None when it cannot tell."""
    code, body, _ = fetch_status(server)
    if body is None or code != 200:
        return None
    return int(body.get("running", 0)), int(body.get("queued", 0))


def _drain(server: RunningServer, timeout: float) -> None:
    """Wait until ``server`` runs and queues nothing (twice in a row), at most
    ``timeout`` seconds, saying what it waits for. Ctrl-C gives up (exit 130,
    lre keeps running)."""
    counts = _in_flight(server)
    if counts is None or counts == (0, 0):
        return
    typer.echo(
        f"lre is running {counts[0]} action(s) and has {counts[1]} queued: waiting for "
        f"them to finish (at most {timeout:.0f} s; `lre down --now` cancels them)"
    )
    deadline = time.monotonic() + timeout
    idle_seen = 0
    shown = counts
    try:
        while idle_seen < 2:
            if time.monotonic() >= deadline:
                typer.echo(
                    f"still {shown[0]} running and {shown[1]} queued after {timeout:.0f} s: "
                    "stopping lre cancels them",
                    err=True,
                )
                return
            time.sleep(DRAIN_POLL_S)
            now = _in_flight(server)
            if now is None:
                return  # it stopped answering: stop it
            idle_seen = idle_seen + 1 if now == (0, 0) else 0
            if now != shown and now != (0, 0):
                typer.echo(f"  {now[0]} running, {now[1]} queued")
            shown = now
    except KeyboardInterrupt:
        typer.echo("interrupted: lre still runs (`lre down --now` stops it at once)", err=True)
        raise typer.Exit(130) from None
    typer.echo("all actions finished")


NowOption = Annotated[
    bool,
    typer.Option("--now", help="Cancel running and queued actions instead of waiting for them."),
]
TimeoutOption = Annotated[
    float,
    typer.Option("--timeout", min=0, help="Seconds to wait for running actions (then cancel)."),
]


def stop_lre(config_path: Path | None, now: bool, timeout: float) -> RunningServer | None:
    """Drain (unless ``now``) and stop the lre of ``config_path``; make every
    linked repository inert. Returns the server that was stopped (None: none ran)."""
    lookup = look_up(config_path)
    recorded = read_pid_file(lookup.state_dir)
    server = lookup.server
    if server is None:
        typer.echo("lre is not running")
        if recorded is not None:
            remove_pid_file(lookup.state_dir, recorded.pid)
        make_repos_inert(lookup.state_dir, recorded)
        return None
    if now:
        counts = _in_flight(server)
        if counts is not None and counts != (0, 0):
            typer.echo(
                f"cancelling {counts[0]} running and {counts[1]} queued action(s): the build "
                'that sent them fails (Bazel says "N errors during bulk transfer"); run it '
                "again, locally or after `lre up`"
            )
    else:
        _drain(server, timeout)
    clean = stop_server(server)
    remove_pid_file(lookup.state_dir, server.pid)
    typer.echo(f"lre (pid {server.pid}) stopped" + ("" if clean else " (killed after timeout)"))
    make_repos_inert(lookup.state_dir, server)
    return server


@app.command()
def down(
    config_path: ConfigOption = None, now: NowOption = False, timeout: TimeoutOption = 600
) -> None:
    """Stop lre once its actions finish; every repository it pointed at itself builds locally.

    With actions running, says so and waits for them (`--now` cancels them).
    """
    stop_lre(config_path, now, timeout)


app.command("stop", help="The same as `lre down` (docker compose's name).")(down)


def _start(
    config_path: Path | None,
    port: int | None,
    knobs: Knobs | None = None,
    log_level: str | None = None,
) -> None:
    knobs = knobs or Knobs()
    up(
        config_path=config_path,
        port=port,
        detach=True,
        no_tui=True,
        no_edit=False,
        no_client_config=False,
        clean_config=False,
        buck_local=False,
        instance="main",
        repo=None,
        log_level=log_level,
        cache_size=knobs.cache_size,
        cpus=knobs.cpus,
        memory_budget=knobs.memory_budget,
        status_port=knobs.status_port,
    )


@app.command()
def start(
    config_path: ConfigOption = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port", help="Port of the gRPC listener.", show_default="the config's, 50051"
        ),
    ] = None,
) -> None:
    """Start lre in the background (`lre up --detach`); repositories linked before use it."""
    _start(config_path, port)


@app.command()
def restart(
    config_path: ConfigOption = None, now: NowOption = False, timeout: TimeoutOption = 600
) -> None:
    """Stop lre (waiting for its actions, unless --now) and start it again with the
    settings it was last started with: its config file, port and flags."""
    settings = last_start(look_up(config_path).state_dir) or StartSettings()
    stopped = stop_lre(config_path, now, timeout)
    port = settings.port
    if stopped is not None and (hostport := split_address(stopped.grpc_address)) is not None:
        port = hostport[1] or port
    if config_path is None and settings.config is not None:
        config_path = Path(settings.config)
    shown = " ".join(settings.knobs.argv())
    if shown or settings.config:
        where = f" --config {settings.config}" if settings.config else ""
        typer.echo(f"starting lre again with its last settings:{where} {shown}".rstrip())
    _start(config_path, port, settings.knobs, settings.log_level)


def _uptime(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _state_of(code: int, body: dict[str, Any] | None, problem: str) -> tuple[bool, str]:
    """(healthy, one word or phrase) for a /status answer."""
    if body is None:
        return (not problem.startswith("/status")), problem or "no status"
    if code == 200 and body.get("status") == "ok":
        return True, "healthy"
    problems = "; ".join(str(p) for p in body.get("problems", ())) or "no reason given"
    return False, f"UNHEALTHY: {problems}"


@app.command()
def status(
    config_path: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Tell whether lre runs, where, whether it is healthy, and which repositories use it.

    Exit status (LSB): 0 running and healthy, 2 running but unhealthy, 3 not
    running. `lre stats` shows what it is doing (the dashboard as text).
    """
    lookup = look_up(config_path)
    repos = sorted(str(repo) for repo in read_links(lookup.state_dir))
    server = lookup.server
    if server is None:
        if as_json:
            typer.echo(json.dumps({"running": False, "repositories": repos}))
        else:
            typer.echo("lre is not running")
        raise typer.Exit(NOT_RUNNING)
    code, body, problem = fetch_status(server)
    healthy, state = _state_of(code, body, problem)
    urls = status_urls(server.status_address)
    if as_json:
        record = {
            "running": True,
            "healthy": healthy,
            "status": body,
            "urls": urls,
            "repositories": repos,
            **dataclasses.asdict(server),
        }
        typer.echo(json.dumps(record, indent=2))
    else:
        body = body or {}
        typer.echo(f"lre is running: {state}")
        typer.echo(f"  pid          {server.pid}, up {_uptime(time.time() - server.started)}")
        typer.echo(f"  gRPC         {server.grpc_address}")
        if "running" in body:
            typer.echo(f"  actions      {body['running']} running, {body.get('queued', 0)} queued")
        if body.get("containment"):
            typer.echo(f"  containment  {body['containment']}")
        for name, url in urls.items():
            typer.echo(f"  {name + ':':<12} {url}")
        typer.echo(f"  log          {server.log_file}")
        typer.echo(f"  repositories {', '.join(repos) if repos else 'none linked'}")
    if not healthy:
        raise typer.Exit(2)


def status_urls(status_address: str) -> dict[str, str]:
    """The status listener's URLs by name ("status", "metrics"); {} when it is off."""
    if not status_address:
        return {}
    return {name: f"http://{status_address}/{name}" for name in ("status", "metrics")}


@app.command()
def ps(
    config_path: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the running lre (one row: pid, address, state, actions, uptime); exit 0."""
    lookup = look_up(config_path)
    rows: list[dict[str, Any]] = []
    if lookup.server is not None:
        server = lookup.server
        code, body, problem = fetch_status(server)
        healthy, _ = _state_of(code, body, problem)
        body = body or {}
        rows.append(
            {
                "pid": server.pid,
                "address": server.grpc_address,
                "status": server.status_address,
                "state": "healthy" if healthy else "unhealthy",
                "running": body.get("running"),
                "queued": body.get("queued"),
                "uptime_s": round(time.time() - server.started),
                "state_dir": str(lookup.state_dir),
            }
        )
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    line = "{:<8} {:<22} {:<22} {:<10} {:>7} {:>6}  {}"
    typer.echo(line.format("PID", "ADDRESS", "STATUS", "STATE", "RUNNING", "QUEUED", "UP"))
    for row in rows:
        typer.echo(
            line.format(
                row["pid"],
                row["address"],
                row["status"] or "-",
                row["state"],
                "-" if row["running"] is None else row["running"],
                "-" if row["queued"] is None else row["queued"],
                _uptime(row["uptime_s"]),
            )
        )
