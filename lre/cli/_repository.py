"""What a repository is, for ``lre up``, ``link`` and ``unlink`` alike.

``resolve_repository`` turns ``--repo`` (or the working directory) into the
directory lre writes client config into, or says plainly why not.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from lre.cli._client_config import REPO_MARKERS, find_repo_root
from lre.cli._client_files import ClientConfigError

#: What makes a directory a Bazel or Buck2 workspace (``.git`` alone does not).
WORKSPACE_MARKERS = ("MODULE.bazel", "WORKSPACE", "WORKSPACE.bazel", ".buckconfig")


def is_bazel_repo(repo: Path) -> bool:
    return any((repo / n).exists() for n in ("MODULE.bazel", "WORKSPACE", "WORKSPACE.bazel"))


def is_buck2_repo(repo: Path) -> bool:
    return (repo / ".buckconfig").exists()


def resolve_repository(option: Path | None, cwd: Path) -> Path:
    """The repository ``lre up``, ``link``, ``unlink`` and ``doctor`` mean: ``--repo``
    as given (an existing directory: lre creates none), else the nearest
    directory at or above ``cwd`` holding a marker, which must then be a
    Bazel or Buck2 workspace (a bare git checkout, lre's own among them, is
    not). The directory must be writable.

    Raises ``ClientConfigError`` saying which of these failed and what to do.
    """
    if option is not None:
        path = option.expanduser()
        if not path.exists():
            raise ClientConfigError(f"--repo {option}: no such directory (lre creates none)")
        if not path.is_dir():
            raise ClientConfigError(
                f"--repo {option}: not a directory; pass the repository's top directory"
            )
        root = path.resolve()
    else:
        found = find_repo_root(cwd)
        if found is None:
            raise ClientConfigError(
                f"no repository here: no {', '.join(REPO_MARKERS)} in {cwd.resolve()} or "
                "above; run it inside your repository or pass --repo DIR"
            )
        if not any((found / name).exists() for name in WORKSPACE_MARKERS):
            raise ClientConfigError(
                f"{found} is not a Bazel or Buck2 workspace (no MODULE.bazel, WORKSPACE or "
                f".buckconfig); run it in your workspace, or `lre link --repo {found}` to "
                "write client config there anyway"
            )
        root = found
    check_writable(root)
    return root


def repository_or_exit(option: Path | None) -> Path:
    """``resolve_repository`` from the working directory; its error is printed
    and the command exits with status 1."""
    try:
        return resolve_repository(option, Path.cwd())
    except ClientConfigError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None


def check_writable(repo: Path) -> None:
    """``ClientConfigError`` when lre cannot write into ``repo`` (read-only file
    system or no write permission), naming the way out."""
    try:
        read_only = bool(os.statvfs(repo).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only or not os.access(repo, os.W_OK):
        why = "is on a read-only file system" if read_only else "is not writable by you"
        raise ClientConfigError(
            f"{repo} {why}, and lre writes its client config (lre.bazelrc or "
            ".buckconfig.d/lre.buckconfig) there; build from a writable copy, or point the "
            "build tool at lre by hand (`lre status` shows its address)"
        )
