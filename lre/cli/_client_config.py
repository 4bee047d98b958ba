"""Write (and remove) the client configuration that points Bazel and Buck2 at lre.

Everything lre writes into a user's repository is marked so that ``lre unlink``
removes exactly that and nothing else:

- ``lre.bazelrc``: a whole file lre owns (first line is ``MARKER``);
- the ``try-import %workspace%/lre.bazelrc`` line under lre's comment, in
  the file ``_bazelrc_import`` picks so that no file git tracks is edited
  (``.bazelrc``, ``user.bazelrc`` or ``~/.bazelrc``); a try-import line the
  user wrote without lre's comment above it is theirs and stays;
- ``.buckconfig.d/lre.buckconfig``: a whole file lre owns;
- ``.buckconfig.local`` (with ``--buck-local``, or to override an execution
  platform that runs only locally): a block between ``BEGIN``/``END`` marker
  lines;
- ``lre_platforms/`` (when the repo names no Buck2 execution platform or one
  that runs only locally): a directory lre owns, holding the platform rule
  from ``toolchains/buck2``.

Functions never overwrite a file lre did not write; they raise
``ClientConfigError`` naming the file instead.

``make_inert`` turns the files lre owns into comments only (what ``lre down``
does, so builds run locally while lre is stopped); the next ``write_*``
fills them in again. The files follow the listener: ``grpcs://`` and the
server's certificate for a TLS listener, an ``authorization`` header when it
wants a token (the token is then in the file, written 0600), ``unix:`` for a
Unix socket (Bazel only: Buck2 cannot use one).

This module holds what spans both clients (removal, inert files, the repository root).
The parts: ``_client_settings`` (what the files point at), ``_client_files``
(markers and the writing of owned files and blocks), ``_bazel_client``
(``lre.bazelrc``), ``_buck2_client`` (the Buck2 config and platform); the
commands import each name from the module that defines it.
"""

from __future__ import annotations

from pathlib import Path

from lre.cli._bazel_client import (
    INERT_BAZELRC,
    lre_bazelrc_opted_in,
)
from lre.cli._bazelrc_import import (
    OPT_IN_KEPT,
    USER_BAZELRC,
    only_lre_lines,
    remove_import_into,
)
from lre.cli._buck2_client import INERT_BUCKCONFIG
from lre.cli._client_files import (
    MARKER,
    WriteReport,
    block_lines,
    owned_by_lre,
    strip_block,
    write_local_block,
    write_owned,
)

__all__ = [
    "REPO_MARKERS",
    "client_config_files",
    "find_repo_root",
    "make_inert",
    "owned_paths",
    "unlink",
]

REPO_MARKERS = ("MODULE.bazel", "WORKSPACE", "WORKSPACE.bazel", ".buckconfig", ".git")


def find_repo_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` holding a repo marker."""
    here = start.resolve()
    for candidate in (here, *here.parents):
        if any((candidate / name).exists() for name in REPO_MARKERS):
            return candidate
    return None


def unlink(repo: Path) -> WriteReport:
    """Remove exactly what ``write_bazel``/``write_buck2`` wrote."""
    report = WriteReport()
    platforms = repo / "lre_platforms"
    platform_files = sorted(platforms.iterdir()) if platforms.is_dir() else []
    for path in (repo / "lre.bazelrc", repo / ".buckconfig.d" / "lre.buckconfig", *platform_files):
        if owned_by_lre(path):
            path.unlink()
            report.removed.append(path)
    for directory in (repo / ".buckconfig.d", repo / "lre_platforms"):
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
            report.removed.append(directory)
    for rc in (repo / ".bazelrc", repo / USER_BAZELRC):
        remove_import_into(rc, report)
    write_local_block(repo / ".buckconfig.local", "", report)
    return report


def client_config_files(repo: Path) -> list[Path]:
    """The files of ``repo`` holding lre's client config (live or inert)."""
    files = [
        path
        for path in (repo / "lre.bazelrc", repo / ".buckconfig.d" / "lre.buckconfig")
        if owned_by_lre(path)
    ]
    local = repo / ".buckconfig.local"
    if local.is_file() and block_lines(local.read_text(encoding="utf-8").splitlines()):
        files.append(local)
    return files


def make_inert(repo: Path) -> WriteReport:
    """Empty every client config file lre owns in ``repo`` down to comments.

    Bazel and Buck2 then build locally; ``.bazelrc``'s try-import still finds
    a file. The files stay lre's, so the next ``write_*`` fills them in.
    ``report.written`` lists the files changed (none when already inert).
    """
    report = WriteReport()
    for path in client_config_files(repo):
        if path.name == "lre.bazelrc":
            kept = OPT_IN_KEPT + "\n" if lre_bazelrc_opted_in(path) else ""
            write_owned(path, INERT_BAZELRC + kept, report)
        elif path.name == ".buckconfig.local":
            write_local_block(path, INERT_BUCKCONFIG, report)
        else:
            write_owned(path, MARKER + "\n" + INERT_BUCKCONFIG, report)
    return report


def owned_paths(repo: Path) -> list[Path]:
    """Files and directories in ``repo`` that lre wrote and the user did not.

    ``.bazelrc`` and ``.buckconfig.local`` count only when nothing but lre's
    lines are in them (lre created them).
    """
    paths = [p for p in client_config_files(repo) if p.name != ".buckconfig.local"]
    platforms = repo / "lre_platforms"
    if platforms.is_dir() and all(owned_by_lre(p) for p in platforms.iterdir()):
        paths.append(platforms)
    paths += [rc for rc in (repo / ".bazelrc", repo / USER_BAZELRC) if only_lre_lines(rc)]
    local = repo / ".buckconfig.local"
    if local.is_file():
        text = local.read_text(encoding="utf-8")
        if text != strip_block(text) and not strip_block(text).strip():
            paths.append(local)
    return paths
