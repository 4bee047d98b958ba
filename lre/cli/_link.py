"""Pointing repositories at a running lre: ``lre link`` and what ``lre up`` shares with it.

``client_settings_for`` turns what the server recorded in its pid file (bound
address, TLS certificate, token file) into ``ClientSettings``; ``point_repo``
writes the Bazel and/or Buck2 client config of one repository, lists lre's
files in ``.git/info/exclude`` and records the repository so that ``lre
down`` can make its config inert and the next ``lre up`` can restore it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Protocol

import typer

from lre.cli._app import app
from lre.cli._bazel_client import detect_bazel_version, write_bazel
from lre.cli._bazelrc_import import TRY_IMPORT, importer, remove_import_into
from lre.cli._buck2_client import write_buck2
from lre.cli._client_config import owned_paths
from lre.cli._client_files import ClientConfigError, WriteReport
from lre.cli._client_settings import ClientSettings
from lre.cli._config_cmd import config_option, load_or_default
from lre.cli._daemon import RunningServer, read_pid_file
from lre.cli._git_exclude import set_excluded
from lre.cli._links import Link, read_links, record_link
from lre.cli._ports import split_address
from lre.cli._repo_owner import serving_elsewhere
from lre.cli._repository import is_bazel_repo, is_buck2_repo, repository_or_exit
from lre.config import resolve, state_dir_of

#: Addresses a server may listen on that a client cannot connect to as such.
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def _read_token(path: str) -> str:
    """The token in ``path`` (checked as the server checks it). Raises ClientConfigError."""
    from lre.service import AuthTokenError, read_token_file  # imports grpc: only when needed

    try:
        return read_token_file(path)
    except AuthTokenError as error:
        raise ClientConfigError(f"no auth header written: {error}") from None


def client_settings_for(server: RunningServer, instance: str) -> ClientSettings:
    """How a client reaches ``server``'s first gRPC listener.

    Raises ClientConfigError when the listener's token file cannot be read.
    """
    token = _read_token(server.auth_token_file) if server.auth_token_file else ""
    if server.grpc_address.startswith("unix:"):
        host, port = "", 0
        unix_socket = server.grpc_address.removeprefix("unix:").removeprefix("//")
    else:
        hostport = split_address(server.grpc_address)
        if hostport is None:
            raise ClientConfigError(f"lre recorded no usable address ({server.grpc_address!r})")
        host, port = _WILDCARDS.get(hostport[0], hostport[0]), hostport[1]
        unix_socket = ""
    return ClientSettings(
        host=host,
        port=port,
        instance_name=instance,
        tls=bool(server.tls_cert_file),
        tls_ca_file=server.tls_cert_file,
        tls_client_auth=server.tls_client_auth,
        auth_token=token,
        unix_socket=unix_socket,
        exec_properties=(
            None if server.exec_properties is None else tuple(server.exec_properties.items())
        ),
    )


class Echo(Protocol):
    """Where a command's lines go (``typer.echo``, or also the dashboard's notes)."""

    def __call__(self, text: str, *, err: bool = False) -> None: ...


def echo_line(text: str, *, err: bool = False) -> None:
    """``typer.echo`` as an ``Echo``."""
    typer.echo(text, err=err)


def print_report(report: WriteReport, echo: Echo = echo_line) -> None:
    """What a write or removal did: one line per file, notes on stderr."""
    for path in report.written:
        echo(f"wrote {path}")
    for path in report.imported_from:
        echo(f"added `try-import %workspace%/lre.bazelrc` to {path}")
    for path in report.removed:
        echo(f"removed {path}")
    for path in report.cleaned:
        echo(f"removed lre's lines from {path} (the rest is as it was)")
    for warning in report.warnings:
        echo(f"note: {warning}", err=True)


def _platform_source() -> Path | None:
    """The Buck2 platform shipped with lre (``lre/_toolchains`` links to ``toolchains/``)."""
    import lre

    candidate = Path(lre.__file__).resolve().parent / "_toolchains" / "buck2"
    return candidate if (candidate / "defs.bzl").exists() else None


def point_repo(repo: Path, server: RunningServer, link: Link, state_dir: Path) -> WriteReport:
    """Write ``repo``'s client config for ``server``, exclude it from git, record the link.

    Bazel config is written unless the repository is Buck2 only. Raises
    ClientConfigError (a file lre would write is the user's, the token
    cannot be read, another live lre serves the repository) or OSError.
    """
    other = serving_elsewhere(repo, server.grpc_address)
    if other is not None:
        raise ClientConfigError(
            f"{repo} is pointed at another lre, which answers on {other}; lre does not take "
            "it over: stop that lre (`lre down` with its --config or LRE_HOME), or "
            f"`lre unlink --repo {repo}` first"
        )
    settings = client_settings_for(server, link.instance)
    report = WriteReport()
    is_buck = is_buck2_repo(repo)
    if is_bazel_repo(repo) or not is_buck:
        bazel = write_bazel(
            repo, settings, edit_bazelrc=link.edit_bazelrc, version=detect_bazel_version()
        )
        _merge(report, bazel)
        via = importer(repo, Path.home())
        if not bazel.imported_from and via is not None and via != repo / ".bazelrc":
            report.warnings.append(f"Bazel reads lre.bazelrc through {via} (its line is there)")
    if is_buck:
        _merge(
            report,
            write_buck2(repo, settings, local=link.buck_local, platform_source=_platform_source()),
        )
    exclude = set_excluded(repo, owned_paths(repo))
    if exclude is not None:
        report.written.append(exclude)
    record_link(state_dir, repo, link)
    return report


def release_home_import(repo: Path, state_dir: Path, home: Path) -> WriteReport:
    """Before ``repo`` is unlinked: take lre's line out of ``home``'s ``.bazelrc``
    when ``repo`` reads ``lre.bazelrc`` through it and no other recorded
    repository does; else say why it stays. Raises OSError."""
    report = WriteReport()
    home_rc = home / ".bazelrc"
    if importer(repo, home) != home_rc:
        return report
    others = [
        other
        for other in read_links(state_dir)
        if other != repo.resolve()
        and (other / "lre.bazelrc").exists()
        and importer(other, home) == home_rc
    ]
    if others:
        report.warnings.append(
            f"kept `{TRY_IMPORT}` in {home_rc}: {others[0]} still reads lre.bazelrc through it"
        )
        return report
    remove_import_into(home_rc, report)
    return report


def _merge(into: WriteReport, report: WriteReport) -> None:
    into.written += report.written
    into.imported_from += report.imported_from
    into.cleaned += report.cleaned
    into.removed += report.removed
    into.warnings += report.warnings


def point_linked_repos(
    server: RunningServer, state_dir: Path, *, skip: Path | None, echo: Echo = echo_line
) -> None:
    """Point every recorded repository (but ``skip``) at ``server`` again, saying so.

    A repository whose lre files are gone (unlinked by hand, deleted) is left
    alone. Problems are printed, not raised.
    """
    for repo, link in read_links(state_dir).items():
        if skip is not None and repo == skip.resolve():
            continue
        if not owned_paths(repo):
            continue
        try:
            report = point_repo(repo, server, link, state_dir)
        except (ClientConfigError, OSError) as error:
            echo(f"error: {repo}: {error}", err=True)
            continue
        print_report(report, echo)
        echo(f"{repo} uses lre again")


RepoOption = Annotated[
    Path | None,
    typer.Option("--repo", help="Repository.", show_default="detected from the current directory"),
]
InstanceOption = Annotated[
    str, typer.Option("--instance", help="Instance name written into client config.")
]
NoEditOption = Annotated[
    bool, typer.Option("--no-edit", help="Do not add the try-import line to .bazelrc.")
]
BuckLocalOption = Annotated[
    bool, typer.Option("--buck-local", help="Write Buck2 settings into .buckconfig.local.")
]


@app.command("link")
def link_command(
    repo: RepoOption = None,
    config_path: Annotated[Path | None, config_option("Config of the running lre.")] = None,
    instance: InstanceOption = "main",
    no_edit: NoEditOption = False,
    buck_local: BuckLocalOption = False,
) -> None:
    """Point a repository's Bazel/Buck2 at the lre that is running (exit 1 if none)."""
    state_dir = state_dir_of(resolve(load_or_default(config_path)))
    server = read_pid_file(state_dir)
    if server is None or not server.alive():
        typer.echo("error: lre is not running; `lre up` starts it", err=True)
        raise typer.Exit(1)
    root = repository_or_exit(repo)
    link_repo_or_exit(root, server, Link(instance, not no_edit, buck_local), state_dir)


def link_repo_or_exit(repo: Path, server: RunningServer, link: Link, state_dir: Path) -> None:
    """``point_repo`` with its report printed; exits 1 on a problem."""
    try:
        print_report(point_repo(repo, server, link, state_dir))
    except (ClientConfigError, OSError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from error
    typer.echo(f"{repo} uses lre (pid {server.pid}) on {server.grpc_address}")
