"""A repository's own remote settings (a team cache or cluster) in its bazelrc files.

A repository may send Bazel to a team's cache or cluster itself (``build
--remote_cache=grpcs://cache.team``). Linked to lre, Bazel would then send
Execute calls to lre and upload inputs to the team cache, and every action
fails for blobs lre never got (or at once, when the team cache is out of
reach). ``lre.bazelrc`` therefore sets Bazel's endpoints itself (see
``lre.cli._bazel_client``); this module finds what the repository set, so
``lre up``/``lre link`` and ``lre doctor`` can say so and whether lre's
lines come late enough to win.

``remote_settings`` reads the repository's ``.bazelrc`` and the files it
imports from the workspace (``user.bazelrc`` among them), in Bazel's order,
skipping ``lre.bazelrc``. A file that cannot be read counts as empty, as a
``try-import`` of it would.

Bazel applies a flag's last value, with every ``common`` line first, then
``build``, then the command's own section (``test``...), each in the order
the files are read. So lre's ``build --config=lre`` wins over a ``common``
or ``build`` line read before it, and loses to one read after it, to a
``test``/``run`` section (for that command) and to a ``--config=NAME`` the
user names (``build:NAME`` lines expand where the option is given).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from lre.cli._bazelrc_import import importer
from lre.cli._client_files import read_or_empty

#: Flags that say where Bazel's remote calls go and what they carry.
ENDPOINT_FLAGS = ("remote_cache", "remote_executor", "remote_instance_name")
HEADER_FLAGS = ("remote_header", "remote_cache_header", "remote_exec_header")
CREDENTIAL_FLAGS = ("google_default_credentials", "google_credentials")
_ALL = ENDPOINT_FLAGS + HEADER_FLAGS + CREDENTIAL_FLAGS
_BOOLEAN = frozenset({"google_default_credentials"})
#: Sections lre's ``build --config=lre`` line outranks when read after them.
_OUTRANKED = frozenset({"common", "build"})
_MAX_DEPTH = 8


@dataclass(frozen=True)
class RemoteSetting:
    """One remote flag in a repository's bazelrc: ``path:line``, the section
    (``build``, ``test``, ``build:ci``), the flag's name and its value
    (``"true"``/``"false"`` for a boolean)."""

    path: Path
    line: int
    section: str
    flag: str
    value: str
    #: Read after lre's try-import (so it wins over lre's line).
    after_lre: bool = False

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def shown(self) -> str:
        """As written in a bazelrc: ``build --remote_cache=grpc://x``."""
        if self.flag in _BOOLEAN:
            prefix = "" if self.value == "true" else "no"
            return f"{self.section} --{prefix}{self.flag}"
        return f"{self.section} --{self.flag}={self.value}"

    @property
    def outranked(self) -> bool:
        """Whether lre's ``build --config=lre`` overrides it for ``bazel build``."""
        return self.section in _OUTRANKED and not self.after_lre


def _flag(word: str, following: str | None) -> tuple[str, str, bool] | None:
    """(flag, value, whether the next word was used) for a remote flag word."""
    if not word.startswith("--"):
        return None
    name, eq, value = word[2:].partition("=")
    if name.startswith("no") and name[2:] in _BOOLEAN and not eq:
        return name[2:], "false", False
    if name not in _ALL:
        return None
    if name in _BOOLEAN:
        return name, "false" if eq and value in ("false", "0", "no") else "true", False
    if eq:
        return name, value, False
    return name, following or "", following is not None


def _import_path(word: str, repo: Path, current: Path) -> Path:
    if word.startswith("%workspace%/"):
        return repo / word.removeprefix("%workspace%/")
    path = Path(word)
    return path if path.is_absolute() else current.parent / path


@dataclass
class _Walk:
    repo: Path
    lre_marker: Path | None
    settings: list[RemoteSetting]
    seen_lre: bool = False

    def read(self, path: Path, depth: int) -> None:
        if depth > _MAX_DEPTH:
            return
        for number, raw in enumerate(read_or_empty(path).splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                words = line.split()
            if not words:
                continue
            if words[0] in ("import", "try-import") and len(words) == 2:
                target = _import_path(words[1], self.repo, path)
                if target.name == "lre.bazelrc":
                    if path == self.lre_marker:
                        self.seen_lre = True
                    continue
                self.read(target, depth + 1)
                continue
            self._line(path, number, words)

    def _line(self, path: Path, number: int, words: list[str]) -> None:
        section = words[0]
        index = 1
        while index < len(words):
            nxt = words[index + 1] if index + 1 < len(words) else None
            found = _flag(words[index], nxt)
            index += 1
            if found is None:
                continue
            flag, value, used_next = found
            if used_next:
                index += 1
            self.settings.append(
                RemoteSetting(path, number, section, flag, value, after_lre=self.seen_lre)
            )


def remote_settings(repo: Path, home: Path) -> list[RemoteSetting]:
    """The remote flags ``repo``'s bazelrc files set, in Bazel's reading order.

    Each is marked ``after_lre`` when Bazel reads it after the try-import of
    ``lre.bazelrc`` (found as ``importer`` finds it; through ``home``'s
    ``.bazelrc`` that is after every workspace line). Unreadable files count
    as empty; nothing raises.
    """
    via = importer(repo, home)
    marker = None if via is None or via == home / ".bazelrc" else via
    walk = _Walk(repo=repo, lre_marker=marker, settings=[])
    walk.read(repo / ".bazelrc", 0)
    return walk.settings


def team_caches(settings: list[RemoteSetting]) -> list[str]:
    """The distinct non-empty ``--remote_cache``/``--remote_executor`` addresses, in order."""
    seen: list[str] = []
    for setting in settings:
        wanted = setting.flag in ("remote_cache", "remote_executor") and setting.value
        if wanted and setting.value not in seen:
            seen.append(setting.value)
    return seen


def team_instance(settings: list[RemoteSetting]) -> str:
    """The last ``--remote_instance_name`` a ``common``/``build`` line sets ("" for none)."""
    names = [
        s.value for s in settings if s.flag == "remote_instance_name" and s.section in _OUTRANKED
    ]
    return names[-1] if names else ""


def link_notes(settings: list[RemoteSetting]) -> list[str]:
    """What ``lre up``/``lre link`` say about the repository's remote settings:
    what was found, that lre's endpoints take precedence (or which line beats
    them and why), what still reaches lre, and how to keep the team cache as
    lre's upstream. Empty when the repository sets none."""
    if not settings:
        return []
    notes: list[str] = []
    caches = team_caches(settings)
    endpoints = [s for s in settings if s.flag in ENDPOINT_FLAGS]
    for setting in endpoints:
        if setting.outranked:
            notes.append(
                f"{setting.where}: `{setting.shown}` (the repository's own remote setting): "
                "lre.bazelrc sets Bazel's remote endpoints and comes later, so builds go to "
                "lre; the file is left as it is"
            )
        else:
            notes.append(f"{setting.where}: `{setting.shown}` {losing_reason(setting)}")
    for setting in settings:
        if setting.flag in HEADER_FLAGS:
            notes.append(
                f"{setting.where}: `{setting.section} --{setting.flag}=...`: Bazel sends this "
                "header to lre too (a bazelrc cannot take a header back); lre ignores it"
            )
        elif setting.flag == "google_default_credentials" and setting.value == "true":
            notes.append(
                f"{setting.where}: `{setting.shown}`: lre.bazelrc turns it off for lre's "
                "plaintext listener (Bazel would refuse to send Google credentials there)"
            )
        elif setting.flag == "google_credentials":
            notes.append(
                f"{setting.where}: `{setting.shown}`: Bazel 4 cannot be told to drop a "
                "credentials file in a later bazelrc line; if builds through lre fail "
                "UNAUTHENTICATED, pass --google_credentials only for the team cache"
            )
    if caches:
        notes.append(upstream_offer(caches[0], team_instance(settings)))
    return notes


def losing_reason(setting: RemoteSetting) -> str:
    """Why a remote setting still beats lre's ``build --config=lre``, and the fix."""
    if setting.after_lre:
        return (
            "comes after the line that imports lre.bazelrc, so it wins over lre: move "
            "the `try-import %workspace%/lre.bazelrc` line below it"
        )
    if ":" in setting.section:
        name = setting.section.split(":", 1)[1]
        return (
            f"applies with `--config={name}`, which then wins over lre: build through lre "
            f"without --config={name}"
        )
    return (
        f"is a `{setting.section}` line, read after lre's `build` line for "
        f"`bazel {setting.section}`, so it wins there: add `{setting.section} --config=lre` "
        "to your own ~/.bazelrc below lre's import"
    )


def upstream_offer(cache: str, instance: str) -> str:
    """How to keep ``cache`` as lre's upstream, and why lre does not set it itself."""
    env = f"LRE_UPSTREAM={shlex.quote(cache)}"
    if instance:
        env += f" LRE_UPSTREAM_INSTANCE={shlex.quote(instance)}"
    return (
        f"team cache {cache}: lre does not read through it on its own (a repository's "
        "file would otherwise choose where every build on this machine looks up and "
        f"sends its blobs); to read through it: `lre down`, then `{env} lre up --config "
        "team-cache.json5` (configs/team-cache.json5; docs/upstream.md)"
    )
