"""``lre up``, ``lre down``, ``lre status`` and ``lre unlink``."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import psutil
import typer

from lre.cli._app import app
from lre.cli._client_config import (
    ClientConfigError,
    ClientSettings,
    WriteReport,
    detect_bazel_version,
    find_repo_root,
    unlink,
    write_bazel,
    write_buck2,
)
from lre.cli._config_cmd import load_or_default
from lre.cli._daemon import (
    LOG_FILE,
    RunningServer,
    holder_of_port,
    read_pid_file,
    remove_pid_file,
    stop_server,
    wait_for_pid_file,
    write_pid_file,
)
from lre.config import Config, ListenerSpec, resolve
from lre.errors import LreError

if TYPE_CHECKING:
    from lre.app import Application, ReadyInfo


def state_dir_of(config: Config) -> Path:
    """lre's state directory (pid file, log). The app is imported lazily: it is
    slow to import and only ``lre up`` needs it."""
    return Path(config.global_.state_dir)


ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="Config file (default: embedded).")
]


def _with_port(config: Config, port: int | None) -> Config:
    """The config with the first server's TCP port replaced by ``port``."""
    if port is None or not config.servers:
        return config
    first = config.servers[0]
    host = first.listener.address.rpartition(":")[0] or "127.0.0.1"
    if first.listener.address.startswith("unix:"):
        raise typer.BadParameter("--port: the first server listens on a Unix socket")
    listener: ListenerSpec = dataclasses.replace(first.listener, address=f"{host}:{port}")
    servers = (dataclasses.replace(first, listener=listener), *config.servers[1:])
    return dataclasses.replace(config, servers=servers)


def _split_address(address: str) -> tuple[str, int] | None:
    if address.startswith("unix:"):
        return None
    host, _, port = address.rpartition(":")
    try:
        return host.strip("[]") or "127.0.0.1", int(port)
    except ValueError:
        return None


def _print_report(report: WriteReport) -> None:
    for path in report.written:
        typer.echo(f"wrote {path}")
    for path in report.removed:
        typer.echo(f"removed {path}")
    for warning in report.warnings:
        typer.echo(f"note: {warning}", err=True)


def _platform_source() -> Path | None:
    """The Buck2 platform shipped with lre (``lre/_toolchains`` links to ``toolchains/``)."""
    import lre

    candidate = Path(lre.__file__).resolve().parent / "_toolchains" / "buck2"
    return candidate if (candidate / "defs.bzl").exists() else None


def _write_client_config(
    repo: Path, ready: ReadyInfo, *, instance: str, edit: bool, buck_local: bool
) -> None:
    hostport = _split_address(ready.grpc_addresses[0]) if ready.grpc_addresses else None
    if hostport is None:
        typer.echo("note: no TCP listener; client config not written", err=True)
        return
    settings = ClientSettings(host=hostport[0], port=hostport[1], instance_name=instance)
    try:
        is_buck = (repo / ".buckconfig").exists()
        is_bazel = any(
            (repo / n).exists() for n in ("MODULE.bazel", "WORKSPACE", "WORKSPACE.bazel")
        )
        if is_bazel or not is_buck:
            _print_report(
                write_bazel(repo, settings, edit_bazelrc=edit, version=detect_bazel_version())
            )
        if is_buck:
            _print_report(
                write_buck2(repo, settings, local=buck_local, platform_source=_platform_source())
            )
    except ClientConfigError as error:
        typer.echo(f"error: {error}", err=True)


async def _dashboard(application: Application) -> None:
    from lre.tui import run_dashboard

    await run_dashboard(application.assembler)


@app.command()
def up(
    config_path: ConfigOption = None,
    port: Annotated[int | None, typer.Option("--port", help="Port of the gRPC listener.")] = None,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Run in the background.")] = False,
    no_tui: Annotated[
        bool, typer.Option("--no-tui", help="Plain log lines, no dashboard.")
    ] = False,
    no_edit: Annotated[
        bool, typer.Option("--no-edit", help="Do not add the try-import line to .bazelrc.")
    ] = False,
    no_client_config: Annotated[
        bool, typer.Option("--no-client-config", help="Write no Bazel/Buck2 config.")
    ] = False,
    clean_config: Annotated[
        bool, typer.Option("--clean-config", help="Remove lre's client config and exit.")
    ] = False,
    buck_local: Annotated[
        bool, typer.Option("--buck-local", help="Write Buck2 settings into .buckconfig.local.")
    ] = False,
    instance: Annotated[
        str, typer.Option("--instance", help="Instance name written into client config.")
    ] = "main",
    repo: Annotated[
        Path | None, typer.Option("--repo", help="Repository (default: detected from cwd).")
    ] = None,
    log_level: Annotated[str | None, typer.Option("--log-level")] = None,
) -> None:
    """Start lre and point the repository's Bazel/Buck2 at it."""
    repo_root = repo.resolve() if repo is not None else find_repo_root(Path.cwd())
    if clean_config:
        if repo_root is None:
            typer.echo("error: no repository found here", err=True)
            raise typer.Exit(1)
        _print_report(unlink(repo_root))
        return
    config = resolve(_with_port(load_or_default(config_path), port))
    state_dir = state_dir_of(config)
    running = read_pid_file(state_dir)
    if running is not None and running.alive():
        typer.echo(
            f"lre is already running (pid {running.pid}) on {running.grpc_address}; "
            "`lre down` stops it",
            err=True,
        )
        raise typer.Exit(1)
    for server in config.servers:
        hostport = _split_address(server.listener.address)
        if hostport is not None and hostport[1] != 0:
            holder = holder_of_port(*hostport)
            if holder is not None:
                typer.echo(
                    f"error: {server.listener.address} is in use by {holder}; "
                    "choose another with --port",
                    err=True,
                )
                raise typer.Exit(1)
    if detach:
        _detach(
            config_path,
            port,
            state_dir,
            repo_root,
            no_edit,
            no_client_config,
            buck_local,
            instance,
            log_level,
        )
        return

    def announce(ready: ReadyInfo) -> None:
        # Client config first: `lre up --detach` returns once the pid file
        # exists, and a build started right after must already find
        # lre.bazelrc (Bazel's try-import skips a missing file silently).
        if repo_root is not None and not no_client_config:
            _write_client_config(
                repo_root, ready, instance=instance, edit=not no_edit, buck_local=buck_local
            )
        write_pid_file(
            state_dir,
            RunningServer(
                pid=os.getpid(),
                grpc_address=ready.grpc_addresses[0] if ready.grpc_addresses else "",
                status_address=ready.status_address,
                repo=str(repo_root or ""),
                log_file=str(state_dir / LOG_FILE),
                started=psutil.Process().create_time(),
            ),
        )
        typer.echo(
            f"lre listening on {', '.join(ready.grpc_addresses)}"
            + (f"; status on http://{ready.status_address}/status" if ready.status_address else ""),
            err=True,
        )

    from lre.app import AppBuildError, StoreBuildError, run_server

    dashboard = sys.stdout.isatty() and not no_tui
    ready_seen = False

    def on_ready(ready: ReadyInfo) -> None:
        nonlocal ready_seen
        ready_seen = True
        announce(ready)

    try:
        run_server(
            config,
            on_ready=on_ready,
            companion=_dashboard if dashboard else None,
            log_level=log_level,
            log_to_file=dashboard,
        )
    except BaseException as error:
        cause = _single_cause(error)
        fixable = (OSError, ValueError, LreError, AppBuildError, StoreBuildError)
        if ready_seen or not isinstance(cause, fixable):
            raise
        # A start-up problem the user can fix: say what, without a traceback.
        typer.echo(f"error: lre could not start: {cause}", err=True)
        raise typer.Exit(1) from error
    finally:
        remove_pid_file(state_dir, os.getpid())
    typer.echo("lre stopped", err=True)


def _single_cause(error: BaseException) -> BaseException:
    """The one exception inside (nested) exception groups, else ``error`` itself."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _detach(
    config_path: Path | None,
    port: int | None,
    state_dir: Path,
    repo_root: Path | None,
    no_edit: bool,
    no_client_config: bool,
    buck_local: bool,
    instance: str,
    log_level: str | None,
) -> None:
    argv = [sys.executable, "-m", "lre", "up", "--no-tui", "--instance", instance]
    if config_path is not None:
        argv += ["--config", str(config_path.resolve())]
    if port is not None:
        argv += ["--port", str(port)]
    if repo_root is not None:
        argv += ["--repo", str(repo_root)]
    if no_edit:
        argv.append("--no-edit")
    if no_client_config:
        argv.append("--no-client-config")
    if buck_local:
        argv.append("--buck-local")
    if log_level:
        argv += ["--log-level", log_level]
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    log_path = state_dir / LOG_FILE
    # Owner-only like the log lre itself writes (lre.app's LOG_FILE_MODE).
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(log_fd, 0o600)
    with open(log_fd, "ab") as log, open(os.devnull, "rb") as null:
        child = subprocess.Popen(
            argv,
            stdin=null,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    try:
        server = wait_for_pid_file(state_dir, psutil.Process(child.pid), timeout=60)
    except RuntimeError as error:
        typer.echo(f"error: {error}; see {log_path}", err=True)
        if child.poll() is None:
            child.kill()
        raise typer.Exit(1) from error
    typer.echo(
        f"lre running in the background (pid {server.pid}) on {server.grpc_address}; "
        f"log: {log_path}; `lre down` stops it"
    )


def _containment_of(detail: str) -> str:
    """The containment mode named in a /status body, or "" when it names none."""
    try:
        body = json.loads(detail)
    except ValueError:
        return ""
    return str(body.get("containment", "")) if isinstance(body, dict) else ""


def _status_of(server: RunningServer) -> tuple[bool, str]:
    if not server.status_address:
        return True, "no status listener configured"
    try:
        with urllib.request.urlopen(f"http://{server.status_address}/status", timeout=5) as r:
            return True, r.read().decode("utf-8", "replace").strip()
    except urllib.error.HTTPError as error:
        return False, error.read().decode("utf-8", "replace").strip()
    except OSError as error:
        return False, f"status endpoint unreachable: {error}"


@app.command()
def down(config_path: ConfigOption = None) -> None:
    """Stop the lre running for this configuration's state directory."""
    state_dir = state_dir_of(resolve(load_or_default(config_path)))
    server = read_pid_file(state_dir)
    if server is None or not server.alive():
        typer.echo("lre is not running")
        if server is not None:
            remove_pid_file(state_dir, server.pid)
        return
    clean = stop_server(server)
    remove_pid_file(state_dir, server.pid)
    typer.echo(f"lre (pid {server.pid}) stopped" + ("" if clean else " (killed after timeout)"))


@app.command()
def status(
    config_path: ConfigOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Tell whether lre runs, where, and whether it is healthy (exit 0 only if so)."""
    state_dir = state_dir_of(resolve(load_or_default(config_path)))
    server = read_pid_file(state_dir)
    if server is None or not server.alive():
        if as_json:
            typer.echo(json.dumps({"running": False}))
        else:
            typer.echo("lre is not running")
        raise typer.Exit(1)
    healthy, detail = _status_of(server)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "running": True,
                    "healthy": healthy,
                    "detail": detail,
                    **dataclasses.asdict(server),
                }
            )
        )
    else:
        uptime = time.time() - server.started
        typer.echo(
            f"lre pid {server.pid} on {server.grpc_address}, up {uptime:.0f} s, "
            f"{'healthy' if healthy else 'UNHEALTHY'}: {detail}"
        )
        containment = _containment_of(detail)
        if containment:
            typer.echo(f"containment of actions: {containment}")
    if not healthy:
        raise typer.Exit(2)


@app.command("unlink")
def unlink_command(
    repo: Annotated[
        Path | None, typer.Option("--repo", help="Repository (default: detected).")
    ] = None,
) -> None:
    """Remove exactly the Bazel/Buck2 config that `lre up` wrote."""
    root = repo.resolve() if repo is not None else find_repo_root(Path.cwd())
    if root is None:
        typer.echo("error: no repository found here", err=True)
        raise typer.Exit(1)
    _print_report(unlink(root))
