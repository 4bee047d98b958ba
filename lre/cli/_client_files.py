"""The markers on what lre writes into a repository, and the writing itself.

A whole file lre owns starts with ``MARKER``; lre's block in a file the
user shares with it (``.buckconfig.local``) sits between ``BEGIN`` and
``END``. ``write_owned`` never overwrites a file without the marker: it
raises ``ClientConfigError`` naming the file. See ``_client_config`` for
which files these are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

MARKER = "# Written by `lre up`; `lre unlink` removes it. Do not edit: it is rewritten."
BEGIN = "# >>> lre (written by `lre up`; `lre unlink` removes this block) >>>"
#: What older lre versions wrote as ``BEGIN`` (recognised, never written: it
#: named --buck-local also when that flag was not given).
OLD_BEGINS = ("# >>> lre (written by `lre up --buck-local`; `lre unlink` removes this block) >>>",)
END = "# <<< lre <<<"


class ClientConfigError(Exception):
    """A file lre would write exists and is not lre's, or a repo is not found."""


@dataclass(slots=True)
class WriteReport:
    """What a write or removal did, for the CLI to print."""

    written: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: Files lre added its import line to (other lines in them are the user's).
    imported_from: list[Path] = field(default_factory=list)
    #: Files lre took its lines out of, keeping the rest.
    cleaned: list[Path] = field(default_factory=list)


def read_or_empty(path: Path) -> str:
    """``path``'s text, or "" when it cannot be read (missing, not UTF-8, ...)."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def owned_by_lre(path: Path) -> bool:
    """Whether ``path``'s first line is ``MARKER`` (False when it cannot be read)."""
    try:
        with path.open(encoding="utf-8") as f:
            return f.readline().rstrip("\n") == MARKER
    except OSError:
        return False


def write_owned(path: Path, text: str, report: WriteReport, *, private: bool = False) -> None:
    """Replace ``path`` (lre's own, or missing) with ``text``; 0600 when ``private``."""
    if path.exists() and not owned_by_lre(path):
        raise ClientConfigError(f"{path} exists and was not written by lre; not overwriting it")
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = 0o600 if private else 0o644
    if (
        path.exists()
        and path.read_text(encoding="utf-8") == text
        and (path.stat().st_mode & 0o777) == mode
    ):
        return
    tmp = path.with_name(path.name + ".lre-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, mode)  # O_CREAT's mode is filtered by the umask
    os.replace(tmp, path)
    report.written.append(path)


def block_lines(lines: list[str]) -> range:
    """1-based line numbers of lre's block in ``.buckconfig.local`` lines."""
    begin = end = 0
    for number, line in enumerate(lines, start=1):
        if (line == BEGIN or line in OLD_BEGINS) and not begin:
            begin = number
        elif line == END and begin:
            end = number
            break
    return range(begin, end + 1) if begin and end else range(0)


def write_local_block(path: Path, text: str, report: WriteReport) -> None:
    """Put ``text`` in lre's block at the end of ``path``; an empty ``text``
    removes the block (and the file, when nothing else is left)."""
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    kept = strip_block(existing)
    if not text:
        if kept != existing:
            if kept.strip():
                path.write_text(kept, encoding="utf-8")
            else:
                path.unlink()
            report.removed.append(path)
        return
    if kept and not kept.endswith("\n"):
        kept += "\n"
    new = kept + BEGIN + "\n" + text + END + "\n"
    if new != existing:
        path.write_text(new, encoding="utf-8")
        report.written.append(path)
    if "authorization: Bearer" in text:  # the token in Buck2's http_headers
        path.chmod(0o600)


def strip_block(text: str) -> str:
    """``text`` without lre's block (its marker lines included)."""
    out: list[str] = []
    inside = False
    for line in text.splitlines(keepends=True):
        stripped = line.rstrip("\n")
        if stripped == BEGIN or stripped in OLD_BEGINS:
            inside = True
            continue
        if inside and stripped == END:
            inside = False
            continue
        if not inside:
            out.append(line)
    return "".join(out)
