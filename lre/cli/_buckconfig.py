"""Read a repository's Buck2 configuration the way Buck2 reads it.

Buck2 layers these files, each later one overriding the ones before:

1. ``/etc/buckconfig.d/`` (every file, see below), ``/etc/buckconfig``,
   ``~/.buckconfig.d/``, ``~/.buckconfig.local`` (outside the repository);
2. in the root cell (the repository root): ``.buckconfig.d/``, then
   ``.buckconfig``, then ``.buckconfig.local``.

A directory contributes every regular file in it, subdirectories walked in
place, entries in name order; symlinks and other special entries are
skipped (Buck2 skips them with a warning). A missing file or directory
contributes nothing.

Inside a file: lines are trimmed; a line ending in ``\\`` continues on the
next; empty lines and lines starting with ``#`` or ``;`` are comments;
``[name]`` starts a section (a `` #...`` comment after it is allowed);
``key = value`` sets a key of the current section (the first ``=`` splits;
nothing after the value is a comment); ``<file:path>`` reads another file at
that point, and ``<?file:path>`` does so only if it exists. A relative path
is taken from the directory of the file holding the include. The section in
effect carries into and out of an included file; each top-level file starts
with none. Values may refer to other keys as ``$(config section.key)``.

The last assignment of a key wins. ``BuckConfig`` keeps every assignment
with its file and line, so callers can say which file decides a key.

Errors Buck2 would report (a missing required include, a line that is none
of the above, an include cycle, a reference cycle) raise
``BuckConfigError`` naming the file and line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: ``(path, is a directory)`` outside the repository, lowest precedence first;
#: ``~`` stands for the home directory.
EXTERNAL_SOURCES = (
    ("/etc/buckconfig.d", True),
    ("/etc/buckconfig", False),
    ("~/.buckconfig.d", True),
    ("~/.buckconfig.local", False),
)
#: ``(path, is a directory)`` in the repository root, lowest precedence first.
PROJECT_SOURCES = ((".buckconfig.d", True), (".buckconfig", False), (".buckconfig.local", False))

_INCLUDE = re.compile(r"<(?P<optional>\?)?file:(?P<path>.+)>")
_REFERENCE = re.compile(r"\$\(config ([^)]*)\)")
_NO_SECTION = "__unspecified__"

#: Reads a file's lines; None when the file does not exist.
LineReader = Callable[[Path], "list[str] | None"]


class BuckConfigError(Exception):
    """Buck2 would refuse this configuration; the message names file and line."""


@dataclass(frozen=True, slots=True)
class Assignment:
    """One ``key = value`` line (after joining continued lines)."""

    section: str
    key: str
    value: str
    file: Path
    line: int

    def where(self, relative_to: Path | None = None) -> str:
        """``file:line``, the file relative to ``relative_to`` when inside it."""
        shown = self.file
        if relative_to is not None and self.file.is_relative_to(relative_to):
            shown = self.file.relative_to(relative_to)
        return f"{shown}:{self.line}"


@dataclass(slots=True)
class BuckConfig:
    """Every assignment in precedence order (the last one of a key wins)."""

    assignments: list[Assignment] = field(default_factory=list)
    #: Top-level files and included files read, in reading order.
    files: list[Path] = field(default_factory=list)

    def winner(self, section: str, key: str) -> Assignment | None:
        """The assignment that decides ``section.key``, or None if unset."""
        for assignment in reversed(self.assignments):
            if assignment.section == section and assignment.key == key:
                return assignment
        return None

    def get(self, section: str, key: str) -> str | None:
        """The value of ``section.key`` with ``$(config ...)`` references
        resolved, or None if unset (``BuckConfigError`` on a cycle)."""
        return self._resolve(section, key, ())

    def section(self, name: str) -> dict[str, Assignment]:
        """The winning assignment of each key of section ``name``."""
        keys: dict[str, Assignment] = {}
        for assignment in self.assignments:
            if assignment.section == name:
                keys[assignment.key] = assignment
        return keys

    def _resolve(self, section: str, key: str, seen: tuple[tuple[str, str], ...]) -> str | None:
        assignment = self.winner(section, key)
        if assignment is None:
            return None
        if (section, key) in seen:
            chain = " -> ".join(f"{s}.{k}" for s, k in (*seen, (section, key)))
            raise BuckConfigError(f"{assignment.where()}: reference cycle {chain}")

        def substitute(match: re.Match[str]) -> str:
            ref_section, _, ref_key = match[1].strip().partition(".")
            value = self._resolve(ref_section, ref_key, (*seen, (section, key)))
            return value if value is not None else ""

        return _REFERENCE.sub(substitute, assignment.value)


def read_lines(path: Path) -> list[str] | None:
    """The lines of config file ``path``, or None when it does not exist.

    ``BuckConfigError`` when it exists but cannot be read or is not UTF-8
    (Buck2 stops there too).
    """
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise BuckConfigError(f"{path}: cannot read it: {error}") from error


def _files_of_directory(directory: Path) -> Iterator[Path]:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from _files_of_directory(Path(entry.path))
        elif entry.is_file(follow_symlinks=False):
            yield Path(entry.path)


def config_files(repo: Path, *, home: Path | None, etc_root: Path = Path("/")) -> list[Path]:
    """The top-level files Buck2 reads for ``repo``'s root cell, lowest
    precedence first. ``home`` None leaves out the user's files (Buck2 does
    so when it knows no home directory); ``etc_root`` replaces ``/`` for
    the system-wide files (tests)."""
    files: list[Path] = []
    for name, is_directory in EXTERNAL_SOURCES:
        if name.startswith("~/"):
            if home is None:
                continue
            path = home / name[2:]
        else:
            path = etc_root / name.lstrip("/")
        files.extend(_files_of_directory(path) if is_directory else [path])
    for name, is_directory in PROJECT_SOURCES:
        path = repo / name
        files.extend(_files_of_directory(path) if is_directory else [path])
    return files


def read_buckconfig(
    repo: Path,
    *,
    home: Path | None = None,
    etc_root: Path = Path("/"),
    read_lines: LineReader = read_lines,
) -> BuckConfig:
    """Read every file of ``config_files`` (and their includes).

    ``home`` defaults to the user's home directory (none known: the user's
    files are left out). ``read_lines`` may hide
    or replace a file's lines (``lre up`` uses it to read the configuration
    without what lre itself wrote). ``BuckConfigError`` as the module says.
    """
    if home is None:
        try:
            home = Path.home()
        except RuntimeError:  # no $HOME and no passwd entry: Buck2 skips them too
            home = None
    config = BuckConfig()
    for path in config_files(repo, home=home, etc_root=etc_root):
        _Parser(config, read_lines).top_level(path)
    return config


class _Parser:
    """Reads one top-level file and its includes into a ``BuckConfig``."""

    def __init__(self, config: BuckConfig, read_lines: LineReader) -> None:
        self.config = config
        self.read_lines = read_lines
        self.section = _NO_SECTION
        self.stack: list[Path] = []

    def top_level(self, path: Path) -> None:
        self.section = _NO_SECTION
        self._file(path, required=False, at="")

    def _file(self, path: Path, *, required: bool, at: str) -> None:
        if path in self.stack:
            raise BuckConfigError(f"{at}: {path} includes itself")
        lines = self.read_lines(path)
        if lines is None:
            if required:
                raise BuckConfigError(f"{at}: included file {path} does not exist")
            return
        self.config.files.append(path)
        self.stack.append(path)
        try:
            for number, line in _logical_lines(lines):
                self._line(path, number, line)
        finally:
            self.stack.pop()

    def _line(self, path: Path, number: int, line: str) -> None:
        at = f"{path}:{number}"
        if line.startswith("["):
            head = line[1:].split(" #", 1)[0]
            if not head.endswith("]"):
                raise BuckConfigError(f"{at}: section {line!r} has no closing ']'")
            self.section = head[:-1]
            return
        key, equals, value = line.partition("=")
        if equals:
            if not key.strip():
                raise BuckConfigError(f"{at}: {line!r} sets a key with no name")
            self.config.assignments.append(
                Assignment(self.section, key.strip(), value.strip(), path, number)
            )
            return
        match = _INCLUDE.search(line)
        if match is None:
            raise BuckConfigError(
                f"{at}: {line!r} is neither [section], key = value nor <file:path>"
            )
        target = Path(os.path.normpath(path.parent / match["path"]))
        self._file(target, required=not match["optional"], at=at)


def _logical_lines(lines: list[str]) -> Iterator[tuple[int, str]]:
    """Trimmed lines with continuations joined and comments dropped, each
    with the 1-based number of its first physical line."""
    joined: list[tuple[int, str]] = []
    for index, raw in enumerate(lines, start=1):
        text = raw.strip()
        if joined and joined[-1][1].endswith("\\"):
            number, head = joined.pop()
            joined.append((number, head[:-1] + text))
        else:
            joined.append((index, text))
    for number, text in joined:
        if text and not text.startswith(("#", ";")):
            yield number, text


def root_cell_name(config: BuckConfig) -> str:
    """The name ``[cells]`` (or the older ``[repositories]``) gives the
    repository root (the entry whose path is ``.``); ``root`` if none does."""
    for section in ("cells", "repositories"):
        for name, assignment in config.section(section).items():
            if os.path.normpath(assignment.value or ".") == ".":
                return name
    return "root"


def canonical_label(config: BuckConfig, label: str) -> tuple[str, str] | None:
    """``(cell, package:name)`` of a target label with the cell alias and an
    empty cell resolved, or None when ``label`` is not ``cell//...``."""
    cell, slashes, rest = label.strip().partition("//")
    if not slashes:
        return None
    if not cell:
        return root_cell_name(config), rest
    alias = config.section("cell_aliases").get(cell)
    return (alias.value if alias is not None else cell), rest


#: Execution platforms whose executor runs every action locally: the one
#: ``buck2 init`` names, ``prelude//platforms:default`` (its
#: CommandExecutorConfig sets ``remote_enabled = False``).
LOCAL_ONLY_PLATFORMS = frozenset({("prelude", "platforms:default")})


def runs_only_locally(config: BuckConfig, platform: str) -> bool:
    """Whether ``platform`` (an ``execution_platforms`` value) is known to
    have remote execution off. False for platforms lre does not know."""
    return canonical_label(config, platform) in LOCAL_ONLY_PLATFORMS
