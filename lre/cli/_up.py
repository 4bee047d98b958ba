"""``lre up``, ``lre down``, ``lre status`` and ``lre unlink``.

``lre up`` starts lre and points the current repository at it (``lre link``
in ``_link`` does the pointing for a running lre); when one already runs for
this state directory it only points the repository at it. ``lre down``
stops it and leaves every repository it pointed at itself building locally.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import psutil
import typer

from lre.cli._app import app
from lre.cli._client_config import client_config_files, make_inert, unlink
from lre.cli._client_files import ClientConfigError
from lre.cli._config_cmd import config_option, load_or_default
from lre.cli._daemon import (
    LOG_FILE,
    RunningServer,
    name_process,
    read_pid_file,
    remove_pid_file,
    wait_for_pid_file,
    write_pid_file,
)
from lre.cli._foreground_stop import ForegroundStop
from lre.cli._git_exclude import set_excluded
from lre.cli._knobs import Knobs, with_knobs
from lre.cli._link import (
    BuckLocalOption,
    Echo,
    InstanceOption,
    NoEditOption,
    RepoOption,
    echo_line,
    link_repo_or_exit,
    point_linked_repos,
    point_repo,
    print_report,
    release_home_import,
)
from lre.cli._links import Link, forget_link, read_links
from lre.cli._ports import check_port, listeners_in_use, split_address, with_port
from lre.cli._repo_owner import serving_elsewhere
from lre.cli._repository import repository_or_exit, resolve_repository
from lre.cli._start_settings import (
    StartSettings,
    differences,
    last_start,
    record_effective,
    record_start,
)
from lre.config import (
    Config,
    ListenerSpec,
    client_exec_properties,
    dump_config,
    resolve,
    state_dir_of,
)
from lre.errors import LreError

if TYPE_CHECKING:
    from lre.app import Application, ReadyInfo


#: What --log-level accepts (global.log_level's values).
LOG_LEVELS = ("debug", "info", "warning", "error")


def _check_log_level(value: str | None) -> str | None:
    """``--log-level``: one of ``LOG_LEVELS`` (any case), else typer's usage error."""
    if value is None or value.lower() in LOG_LEVELS:
        return value.lower() if value else value
    choices = ", ".join(repr(level) for level in LOG_LEVELS)
    raise typer.BadParameter(f"{value!r} is not one of {choices}", param_hint="--log-level")


ConfigOption = Annotated[Path | None, config_option()]


def _server_record(
    config: Config, ready: ReadyInfo, state_dir: Path, repo: Path | None
) -> RunningServer:
    """What the pid file says about this lre once it listens."""
    listener = config.servers[0].listener if config.servers else ListenerSpec()
    return RunningServer(
        pid=os.getpid(),
        grpc_address=ready.grpc_addresses[0] if ready.grpc_addresses else "",
        status_address=ready.status_address,
        repo=str(repo or ""),
        log_file=str(state_dir / LOG_FILE),
        started=psutil.Process().create_time(),
        tls_cert_file=listener.tls.cert_file if listener.tls is not None else "",
        tls_client_auth=listener.tls is not None and bool(listener.tls.client_ca_file),
        auth_token_file=listener.auth_token_file,
        exec_properties=dict(client_exec_properties(config)),
    )


def _point_repos(
    server: RunningServer,
    state_dir: Path,
    repo: Path | None,
    link: Link,
    echo: Echo = echo_line,
) -> None:
    """Point ``repo`` and every repository linked before at ``server``; print what changed."""
    if repo is not None:
        try:
            print_report(point_repo(repo, server, link, state_dir), echo)
        except (ClientConfigError, OSError) as error:
            echo(f"error: {error}", err=True)
    point_linked_repos(server, state_dir, skip=repo, echo=echo)


def say(text: str, *, err: bool = False) -> None:
    """``typer.echo`` that survives a terminal that is gone (SIGHUP, a closed pipe)."""
    try:
        typer.echo(text, err=err)
    except OSError:
        pass


def _dashboard_of(
    notes: list[str], stop: ForegroundStop
) -> Callable[[Application], Awaitable[None]]:
    """The dashboard of a foreground ``lre up``: ``q`` and Ctrl-C stop lre
    through ``stop`` (after the running actions, twice: at once);
    ``notes`` (what lre wrote while starting) stay on top of the screen."""

    async def dashboard(application: Application) -> None:
        import trio

        from lre.tui import UP_FOOTER, run_dashboard

        async def counts() -> tuple[int, int]:
            snapshot = application.assembler()
            return snapshot.running, snapshot.queued

        async with trio.open_nursery() as nursery:
            stop.bind(application, nursery, counts)
            try:
                await run_dashboard(
                    application.assembler,
                    quit_keys=True,
                    notes=notes,
                    footer=UP_FOOTER,
                    on_quit=stop.press,
                    status_line=lambda: stop.line,
                )
            except OSError:  # the terminal went away: SIGHUP stops lre
                return
        application.request_stop()

    return dashboard


@app.command()
def up(
    config_path: ConfigOption = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            callback=lambda value: check_port(value, "--port"),
            help="Port of the gRPC listener (the status listener moves too if its port is taken).",
            show_default="the config's, 50051",
        ),
    ] = None,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Run in the background.")] = False,
    no_tui: Annotated[
        bool, typer.Option("--no-tui", help="Plain log lines, no dashboard.")
    ] = False,
    no_edit: NoEditOption = False,
    no_client_config: Annotated[
        bool, typer.Option("--no-client-config", help="Write no Bazel/Buck2 config.")
    ] = False,
    clean_config: Annotated[
        bool, typer.Option("--clean-config", help="Remove lre's client config and exit.")
    ] = False,
    buck_local: BuckLocalOption = False,
    instance: InstanceOption = "main",
    repo: RepoOption = None,
    log_level: Annotated[
        str | None,
        typer.Option(
            "--log-level",
            callback=_check_log_level,
            help="Lowest level logged.",
            show_default="the config's global.log_level, info",
        ),
    ] = None,
    cache_size: Annotated[
        str | None,
        typer.Option(
            "--cache-size",
            help="CAS size limit, e.g. 20G.",
            show_default="the config's; auto: 25% of the free disk",
        ),
    ] = None,
    cpus: Annotated[
        int | None,
        typer.Option(
            "--cpus",
            min=1,
            help="CPUs the worker offers.",
            show_default="the config's; auto: every CPU lre may use",
        ),
    ] = None,
    memory_budget: Annotated[
        str | None,
        typer.Option(
            "--memory-budget",
            help="Memory all actions may reserve, e.g. 8G.",
            show_default="the config's; auto: 75% of RAM minus memory_floor",
        ),
    ] = None,
    status_port: Annotated[
        int | None,
        typer.Option(
            "--status-port",
            min=0,
            max=65535,
            help="Port of /status and /metrics (0: any free port).",
            show_default="the config's, 50061",
        ),
    ] = None,
) -> None:
    """Start lre and point the repository's Bazel/Buck2 at it.

    When lre already runs for this state directory, only point the
    repository at it (like `lre link`) and exit 0.
    """
    repo_root: Path | None = None
    try:
        repo_root = resolve_repository(repo, Path.cwd())
    except ClientConfigError as error:
        if repo is not None or clean_config:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(1) from None
        if not no_client_config:
            typer.echo(f"note: {error}; no client config written", err=True)
    if clean_config:
        assert repo_root is not None
        print_report(unlink(repo_root))
        return
    if port and status_port is not None and port == status_port:
        # Both given by the user: moving one of them would quietly disobey a flag.
        raise typer.BadParameter(
            f"--port and --status-port are both {port}: the gRPC and the status listener "
            "need a port each",
            param_hint="--status-port",
        )
    knobs = Knobs(cache_size, cpus, memory_budget, status_port)
    config = resolve(with_port(with_knobs(load_or_default(config_path), knobs), port))
    state_dir = state_dir_of(config)
    link = Link(instance=instance, edit_bazelrc=not no_edit, buck_local=buck_local)
    running = read_pid_file(state_dir)
    if running is not None and running.alive():
        _use_running(running, port, knobs, repo_root, no_client_config, link, state_dir)
        return
    busy = listeners_in_use(config)
    if busy:
        _refuse(
            busy,
            "choose another port with --port (the status listener follows it), stop the "
            "holder, or edit the config",
            code=1,
        )
    if detach:
        server = _detach(config_path, port, state_dir, repo_root, instance, log_level, knobs)
        if not no_client_config:
            _point_repos(server, state_dir, repo_root, link)
        where = (
            f"; status on http://{server.status_address}/status" if server.status_address else ""
        )
        typer.echo(
            f"lre running in the background (pid {server.pid}) on {server.grpc_address}{where}; "
            f"log: {server.log_file}; `lre down` stops it"
        )
        return

    from lre.app import AppBuildError, StoreBuildError, run_server

    name_process()

    dashboard = sys.stdout.isatty() and not no_tui
    ready_seen = False
    notes: list[str] = []

    def echo(text: str, *, err: bool = False) -> None:
        say(text, err=err)
        if dashboard:
            notes.append(text)

    started: list[RunningServer] = []

    def announce(ready: ReadyInfo) -> None:
        server = _server_record(config, ready, state_dir, repo_root)
        started.append(server)
        # Client config first: the pid file means "ready", and a build
        # started then must already find lre.bazelrc (Bazel's try-import
        # skips a missing file silently).
        if not no_client_config:
            _point_repos(server, state_dir, repo_root, link, echo)
        bound = split_address(server.grpc_address)
        try:
            record_start(
                state_dir,
                StartSettings(
                    config=str(config_path.resolve()) if config_path is not None else None,
                    port=bound[1] if bound is not None and bound[1] else port,
                    knobs=knobs,
                    log_level=log_level,
                ),
            )
            record_effective(state_dir, dump_config(config))
        except OSError as error:
            echo(f"note: {error}: `lre restart` will not know these settings", err=True)
        write_pid_file(state_dir, server)
        echo(
            f"lre listening on {', '.join(ready.grpc_addresses)}"
            + (f"; status on http://{ready.status_address}/status" if ready.status_address else "")
            + ("; q or Ctrl-C stops it" if dashboard else ""),
            err=True,
        )

    def on_ready(ready: ReadyInfo) -> None:
        nonlocal ready_seen
        ready_seen = True
        announce(ready)

    stop = ForegroundStop()
    try:
        run_server(
            config,
            on_ready=on_ready,
            companion=_dashboard_of(notes, stop) if dashboard else None,
            on_interrupt=stop.press if dashboard else None,
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
        for problem in listeners_in_use(config):
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(1) from error
    finally:
        remove_pid_file(state_dir, os.getpid())
        if ready_seen and not no_client_config:
            # Stopped in the foreground (Ctrl-C, q, SIGTERM, SIGHUP): as `lre down` does.
            make_repos_inert(state_dir, started[0] if started else None)
    say("lre stopped", err=True)


def _use_running(
    running: RunningServer,
    port: int | None,
    knobs: Knobs,
    repo_root: Path | None,
    no_client_config: bool,
    link: Link,
    state_dir: Path,
) -> None:
    """`lre up` while lre runs: point the repository at it (exit 0), or say why
    not. A flag whose value differs from the running lre's (``--port`` and the
    knobs, against ``start.json``) is refused with exit 2: lre cannot change
    it without a restart, and ignoring it would leave the user believing it
    took."""
    typer.echo(f"lre is already running (pid {running.pid}) on {running.grpc_address}")
    hostport = split_address(running.grpc_address)
    problems: list[str] = []
    if port is not None and (hostport is None or hostport[1] != port):
        problems.append(f"--port {port}: lre runs on {running.grpc_address}")
    recorded = last_start(state_dir)
    if recorded is not None:
        problems += differences(recorded, knobs)
    if problems:
        _refuse(
            problems,
            "lre cannot change that while it runs: `lre down`, then `lre up` with your flags "
            "(`lre restart` keeps the running settings)",
            code=2,
        )
    if repo_root is None or no_client_config:
        return
    link_repo_or_exit(repo_root, running, link, state_dir)


def _refuse(problems: Iterable[str], hint: str, *, code: int) -> NoReturn:
    """Prints each problem, then what to do about them, and exits with ``code``."""
    for problem in problems:
        typer.echo(f"error: {problem}", err=True)
    typer.echo(hint, err=True)
    raise typer.Exit(code)


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
    instance: str,
    log_level: str | None,
    knobs: Knobs,
) -> RunningServer:
    """Start ``lre up`` in the background and wait until it listens.

    The child writes no client config: the caller does, so that what it
    prints reaches the terminal. Exits 1 (printing what the child wrote)
    when the child stops or is not ready within 60 s.
    """
    argv = [sys.executable, "-m", "lre", "up", "--no-tui", "--no-client-config"]
    argv += ["--instance", instance]
    if config_path is not None:
        argv += ["--config", str(config_path.resolve())]
    if port is not None:
        argv += ["--port", str(port)]
    if repo_root is not None:
        argv += ["--repo", str(repo_root)]
    if log_level:
        argv += ["--log-level", log_level]
    argv += knobs.argv()
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    log_path = state_dir / LOG_FILE
    # Owner-only like the log lre itself writes (lre.app's LOG_FILE_MODE).
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(log_fd, 0o600)
    with open(log_fd, "ab") as log, open(os.devnull, "rb") as null:
        offset = log.seek(0, os.SEEK_END)
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
        if child.poll() is None:
            child.kill()
            child.wait(10)
        for line in _tail(log_path, offset):
            typer.echo(line, err=True)
        typer.echo(f"error: {error}; the whole log: {log_path}", err=True)
        raise typer.Exit(1) from error
    # What the foreground lre would have shown on the terminal: its warnings.
    for line in _tail(log_path, offset, lines=200):
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[1] in ("WARNING", "ERROR", "CRITICAL"):
            typer.echo(f"note: {parts[3]}", err=True)
    return server


def _tail(path: Path, offset: int, lines: int = 20) -> list[str]:
    """The last ``lines`` lines written to ``path`` after ``offset`` ([] if unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def make_repos_inert(state_dir: Path, server: RunningServer | None) -> None:
    """Leave every repository lre pointed at itself building locally; say so per
    repository. One that another live lre serves now is left alone."""
    repos = set(read_links(state_dir))
    if server is not None and server.repo:
        repos.add(Path(server.repo))
    ours = server.grpc_address if server is not None else ""
    # Every repository first, then what happened: the terminal may be gone.
    lines: list[tuple[str, bool]] = []
    for repo in sorted(repos):
        other = serving_elsewhere(repo, ours) if ours else None
        if other is not None:
            lines.append((f"{repo}: left alone: another lre serves it on {other}", False))
            continue
        try:
            make_inert(repo)
            files = client_config_files(repo)
        except (ClientConfigError, OSError) as error:
            lines.append((f"error: {repo}: {error}", True))
            continue
        if files:
            names = ", ".join(str(p.relative_to(repo)) for p in files)
            lines.append((f"{repo}: builds locally now ({names} inert until `lre up`)", False))
            if any("buckconfig" in p.name for p in files):
                lines.append((f"note: {repo}: run `buck2 kill` so Buck2 rereads it", True))
    for text, err in lines:
        say(text, err=err)


@app.command("unlink")
def unlink_command(
    repo: RepoOption = None,
    config_path: ConfigOption = None,
) -> None:
    """Remove exactly the Bazel/Buck2 config that `lre up` wrote (and lre's git excludes)."""
    root = repository_or_exit(repo)
    state_dir = state_dir_of(resolve(load_or_default(config_path)))
    try:
        home = release_home_import(root, state_dir, Path.home())
        report = unlink(root)
        exclude = set_excluded(root, [])
        forget_link(state_dir, root)
    except OSError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from error
    if exclude is not None:  # the file stays: only lre's lines went
        report.cleaned.append(exclude)
    print_report(report)
    print_report(home)
