"""``lre doctor``: is this machine and this repository set up to build through lre?

One line per check, ``OK``/``WARN``/``FAIL``/``SKIP``, and under a problem
the exact fix. Exit status 1 when any check FAILs (a build through lre will
not work), else 0. ``--json`` prints ``{"ok": ..., "checks": [...]}``.
The checks are in ``_doctor_clients.py`` (repository, Bazel, Buck2),
``_doctor_host.py`` (lre, ports, disk, containment, user, clock) and
``_doctor_views.py`` (the filesystem of the views' action directories).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from lre.cli._app import app
from lre.cli._checks import Check
from lre.cli._client_config import find_repo_root
from lre.cli._doctor_cache import bytes_check, cache_checks
from lre.cli._doctor_clients import bazel_version, repository_checks
from lre.cli._doctor_host import host_checks
from lre.cli._doctor_views import view_filesystem_check
from lre.cli._link import RepoOption
from lre.cli._links import read_links
from lre.cli._local_stores import LocalStores, LocalStoresError, local_stores
from lre.cli._quarantine_report import quarantine_check
from lre.cli._repository import is_bazel_repo
from lre.cli._running import look_up
from lre.cli._up import ConfigOption
from lre.cli._written_addresses import written_addresses


def run_checks(config_path: Path | None, repo: Path | None) -> list[Check]:
    """Every check, in the order they are printed."""
    lookup = look_up(config_path)
    checks: list[Check] = []
    if lookup.config_problems:
        checks.append(
            Check(
                "config",
                "FAIL",
                "; ".join(lookup.config_problems),
                "fix those lines (`lre config check FILE` lists them); the other checks "
                "use the embedded default meanwhile",
            )
        )
    try:
        stores = local_stores(lookup.config)
    except LocalStoresError as error:
        checks.append(
            Check("stores", "FAIL", str(error), "fix the configuration (`lre config check`)")
        )
        stores = LocalStores((), ())
    repos = list(read_links(lookup.state_dir)) + ([repo] if repo is not None else [])
    written = written_addresses(repos) if lookup.server is None else {}
    checks += host_checks(lookup, stores, written)
    checks.append(view_filesystem_check(lookup.config))
    checks.append(quarantine_check(lookup.config))
    checks += cache_checks(lookup)
    if repo is not None and is_bazel_repo(repo):
        checks.append(bytes_check(repo, bazel_version()[1]))
    checks += repository_checks(repo, lookup.server)
    return checks


@app.command("doctor")
def doctor(
    config_path: ConfigOption = None,
    repo: RepoOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Check lre, this machine and this repository; print the fix for each problem.

    Exits with status 1 when a check FAILs.
    """
    if repo is not None and not repo.is_dir():
        raise typer.BadParameter(f"{str(repo)!r} is not a directory", param_hint="--repo")
    root = repo.resolve() if repo is not None else find_repo_root(Path.cwd())
    checks = run_checks(config_path, root)
    failed = any(c.status == "FAIL" for c in checks)
    if as_json:
        typer.echo(json.dumps({"ok": not failed, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for check in checks:
            typer.echo(f"{check.status:<4}  {check.name:<{width}}  {check.message}")
            if check.fix and check.status in ("WARN", "FAIL"):
                typer.echo(f"{'':<4}  {'':<{width}}  fix: {check.fix}")
    if failed:
        raise typer.Exit(1)
