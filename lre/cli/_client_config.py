"""Write (and remove) the client configuration that points Bazel and Buck2 at lre.

Everything lre writes into a user's repository is marked so that ``lre unlink``
removes exactly that and nothing else:

- ``lre.bazelrc``: a whole file lre owns (first line is ``MARKER``);
- ``.bazelrc``: two lines, the marker comment and ``try-import
  %workspace%/lre.bazelrc``;
- ``.buckconfig.d/lre.buckconfig``: a whole file lre owns;
- ``.buckconfig.local`` (with ``--buck-local``, or to override an execution
  platform that runs only locally): a block between ``BEGIN``/``END`` marker
  lines;
- ``lre_platforms/`` (when the repo names no Buck2 execution platform or one
  that runs only locally): a directory lre owns, holding the platform rule
  from ``toolchains/buck2``.

Functions never overwrite a file lre did not write; they raise
``ClientConfigError`` naming the file instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from lre.cli._buckconfig import (
    BuckConfigError,
    canonical_label,
    read_buckconfig,
    read_lines,
    root_cell_name,
    runs_only_locally,
)

MARKER = "# Written by `lre up`; `lre unlink` removes it. Do not edit: it is rewritten."
BEGIN = "# >>> lre (written by `lre up --buck-local`; `lre unlink` removes this block) >>>"
END = "# <<< lre <<<"
TRY_IMPORT = "try-import %workspace%/lre.bazelrc"
BAZELRC_COMMENT = "# Added by `lre up`: use lre for remote execution (`lre unlink` removes it)."

REPO_MARKERS = ("MODULE.bazel", "WORKSPACE", "WORKSPACE.bazel", ".buckconfig", ".git")

#: Bazel version assumed when ``bazel --version`` prints no number (Debian's
#: bazel-bootstrap prints "bazel no_version"; it is 4.2.3).
UNVERSIONED_BAZEL = (4, 2, 3)


class ClientConfigError(Exception):
    """A file lre would write exists and is not lre's, or a repo is not found."""


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """What the generated client files point at."""

    host: str
    port: int
    instance_name: str = "main"
    cpus: int = field(default_factory=lambda: os.cpu_count() or 2)
    os_family: str = "Linux"


@dataclass(slots=True)
class WriteReport:
    """What a write or removal did, for the CLI to print."""

    written: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def find_repo_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` holding a repo marker."""
    here = start.resolve()
    for candidate in (here, *here.parents):
        if any((candidate / name).exists() for name in REPO_MARKERS):
            return candidate
    return None


def parse_bazel_version(text: str) -> tuple[int, int, int]:
    """Parse ``bazel --version`` output; unversioned builds count as 4.2.3."""
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if match is None:
        return UNVERSIONED_BAZEL
    return int(match[1]), int(match[2]), int(match[3] or 0)


def detect_bazel_version(bazel: str = "bazel") -> tuple[int, int, int] | None:
    """The installed Bazel's version, or None when no Bazel is on PATH.

    ``bazel --version`` is answered by the client alone and starts no server.
    """
    path = shutil.which(bazel)
    if path is None:
        return None
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return UNVERSIONED_BAZEL
    return parse_bazel_version(out.stdout + out.stderr)


def bazelrc_text(settings: ClientSettings, version: tuple[int, int, int] | None) -> str:
    """The content of ``lre.bazelrc`` for the given Bazel version.

    All flags sit under ``build:lre``; a final ``build --config=lre`` makes
    lre the default, and a user who wants it opt-in deletes that one line.
    Flags newer than the installed Bazel are left out.
    """
    v = version or UNVERSIONED_BAZEL
    jobs = max(16, 8 * settings.cpus)
    lines = [
        MARKER,
        f"# lre at {settings.host}:{settings.port}, instance {settings.instance_name!r}.",
        f"# Bazel {'.'.join(map(str, v))} detected; newer-only flags are omitted.",
        f"build:lre --remote_executor=grpc://{settings.host}:{settings.port}",
        f"build:lre --remote_instance_name={settings.instance_name}",
        "build:lre --remote_default_exec_properties=cpu_count=1",
        f"build:lre --remote_default_exec_properties=OSFamily={settings.os_family}",
        "# lre does the admission control, so Bazel may send many actions at once.",
        f"build:lre --jobs={jobs}",
        "build:lre --remote_timeout=600",
        "build:lre --spawn_strategy=remote,sandboxed,local",
        "build:lre --incompatible_strict_action_env",
    ]
    if v >= (7, 0, 0):
        lines.append("build:lre --remote_cache_compression")
    elif v >= (5, 0, 0):
        lines.append("build:lre --experimental_remote_cache_compression")
    if v >= (4, 0, 0):
        # Intermediate outputs stay in lre's CAS; Bazel fetches only what was
        # asked for (the bench's clean remote build: docs/benchmarks.md).
        lines.append("build:lre --remote_download_toplevel")
    lines += [
        "",
        "# Delete this line to make lre opt-in (`bazel build --config=lre`).",
        "build --config=lre",
        "",
    ]
    return "\n".join(lines)


def buckconfig_text(settings: ClientSettings, platforms: str | None) -> str:
    """The content of ``.buckconfig.d/lre.buckconfig`` (or the local block)."""
    address = f"grpc://{settings.host}:{settings.port}"
    lines = [
        "[buck2_re_client]",
        f"engine_address = {address}",
        f"cas_address = {address}",
        f"action_cache_address = {address}",
        "tls = false",
        f"instance_name = {settings.instance_name}",
    ]
    if platforms is not None:
        lines += ["", "[build]", f"execution_platforms = {platforms}"]
    return "\n".join(lines) + "\n"


def _owned(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as f:
            return f.readline().rstrip("\n") == MARKER
    except OSError:
        return False


def _write_owned(path: Path, text: str, report: WriteReport) -> None:
    if path.exists() and not _owned(path):
        raise ClientConfigError(f"{path} exists and was not written by lre; not overwriting it")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    tmp = path.with_name(path.name + ".lre-tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    report.written.append(path)


def write_bazel(
    repo: Path,
    settings: ClientSettings,
    *,
    edit_bazelrc: bool,
    version: tuple[int, int, int] | None,
) -> WriteReport:
    """Write ``lre.bazelrc`` and (when ``edit_bazelrc``) the try-import line."""
    report = WriteReport()
    _write_owned(repo / "lre.bazelrc", bazelrc_text(settings, version), report)
    bazelrc = repo / ".bazelrc"
    existing = bazelrc.read_text(encoding="utf-8") if bazelrc.exists() else ""
    if TRY_IMPORT in existing.splitlines():
        return report
    if not edit_bazelrc:
        report.warnings.append(
            f"add `{TRY_IMPORT}` to {bazelrc} (or pass --bazelrc=lre.bazelrc) to use lre"
        )
        return report
    prefix = existing if existing.endswith("\n") or not existing else existing + "\n"
    bazelrc.write_text(prefix + BAZELRC_COMMENT + "\n" + TRY_IMPORT + "\n", encoding="utf-8")
    report.written.append(bazelrc)
    return report


def write_buck2(
    repo: Path,
    settings: ClientSettings,
    *,
    local: bool,
    platform_source: Path | None,
    home: Path | None = None,
) -> WriteReport:
    """Write the Buck2 RE client config, and lre's platform where Buck2 would
    otherwise run everything locally.

    The repository's configuration is read as Buck2 reads it (``_buckconfig``;
    ``home`` for the user's files, default the home directory), leaving out
    what lre wrote before. The RE keys go into ``.buckconfig.d/lre.buckconfig``
    or, with ``local``, a block at the end of ``.buckconfig.local``. When no
    execution platform is set, lre's (copied from ``platform_source`` to
    ``lre_platforms/``) is named next to them; when the one set is known to
    run locally (``buck2 init``'s), lre's is named in the ``.buckconfig.local``
    block, the file that beats ``.buckconfig``; any other platform gets a note
    saying exactly what to change. Afterwards the configuration is read again
    and every key of lre's that another file overrides is named in a warning.
    ``ClientConfigError`` when Buck2 could not read the configuration either.
    """
    report = WriteReport()
    try:
        user = read_buckconfig(repo, home=home, read_lines=_lines_without_lre)
    except BuckConfigError as error:
        raise ClientConfigError(f"Buck2 cannot read this configuration: {error}") from error
    lre_platform = f"{root_cell_name(user)}//lre_platforms:lre"
    platform_here: str | None = None
    platform_local: str | None = None
    current = user.winner("build", "execution_platforms")
    if current is None or runs_only_locally(user, current.value):
        if platform_source is None:
            report.warnings.append(
                "this lre installation lacks its Buck2 platform (toolchains/buck2); "
                "Buck2 will run actions locally"
            )
        else:
            _copy_platform(repo, platform_source, report)
            if current is None:
                platform_here = lre_platform
            else:
                platform_local = lre_platform
                report.warnings.append(
                    f"Buck2's execution platform {current.value} ({current.where(repo)}) "
                    f"runs every action locally; lre named {lre_platform} in "
                    ".buckconfig.local, which overrides it (`lre unlink` removes that)"
                )
    elif canonical_label(user, current.value) != canonical_label(user, lre_platform):
        report.warnings.append(
            f"Buck2 runs actions on {current.value} ({current.where(repo)}); lre cannot tell "
            "whether its executor has remote_enabled = True. If not, actions stay local: "
            f"copy {platform_source or 'toolchains/buck2'} to {repo / 'lre_platforms'} and add "
            f"`[build]` `execution_platforms = {lre_platform}` to {repo / '.buckconfig.local'}"
        )
    text = buckconfig_text(settings, platform_here)
    dropin = repo / ".buckconfig.d" / "lre.buckconfig"
    if local:
        block = buckconfig_text(settings, platform_here or platform_local)
        _write_local_block(repo / ".buckconfig.local", block, report)
        if _owned(dropin):
            dropin.unlink()
            report.removed.append(dropin)
    else:
        _write_owned(dropin, MARKER + "\n" + text, report)
        block = "" if platform_local is None else _platform_section(platform_local)
        _write_local_block(repo / ".buckconfig.local", block, report)
    _warn_overridden(repo, home, text + block, report)
    report.warnings.append("run `buck2 kill` so the Buck2 daemon reads the new RE settings")
    return report


def _platform_section(platform: str) -> str:
    return f"[build]\nexecution_platforms = {platform}\n"


def _copy_platform(repo: Path, platform_source: Path, report: WriteReport) -> None:
    for name in ("BUCK", "defs.bzl"):
        src = (platform_source / name).read_text(encoding="utf-8")
        body = src if src.startswith(MARKER) else MARKER + "\n" + src
        _write_owned(repo / "lre_platforms" / name, body, report)


def _block_lines(lines: list[str]) -> range:
    """1-based line numbers of lre's block in ``.buckconfig.local`` lines."""
    begin = end = 0
    for number, line in enumerate(lines, start=1):
        if line == BEGIN and not begin:
            begin = number
        elif line == END and begin:
            end = number
            break
    return range(begin, end + 1) if begin and end else range(0)


def _lines_without_lre(path: Path) -> list[str] | None:
    """A Buck2 config file's lines as the user wrote them: lre's own files
    read as empty, lre's block in ``.buckconfig.local`` as blank lines."""
    lines = read_lines(path)
    if lines is None:
        return None
    if lines and lines[0] == MARKER:
        return []
    block = _block_lines(lines)
    return ["" if number in block else line for number, line in enumerate(lines, start=1)]


def _warn_overridden(repo: Path, home: Path | None, written: str, report: WriteReport) -> None:
    """Read the configuration as Buck2 will and warn about each key lre wrote
    that some other file decides."""
    try:
        final = read_buckconfig(repo, home=home)
    except BuckConfigError as error:
        report.warnings.append(f"Buck2 cannot read the configuration lre wrote: {error}")
        return
    local = repo / ".buckconfig.local"
    local_lines = read_lines(local) or []
    ours = {repo / ".buckconfig.d" / "lre.buckconfig"}
    section = ""
    for line in written.splitlines():
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key = line.partition("=")[0].strip()
        if not key:
            continue
        winner = final.winner(section, key)
        if winner is None or winner.file in ours:
            continue
        if winner.file == local and winner.line in _block_lines(local_lines):
            continue
        report.warnings.append(
            f"{winner.where(repo)} sets [{section}] {key} = {winner.value}, which overrides "
            "lre's setting, so Buck2 will not use lre for it: remove that line"
            + ("" if winner.file == local else ", or rerun `lre up --buck-local`")
        )


def _write_local_block(path: Path, text: str, report: WriteReport) -> None:
    """Put ``text`` in lre's block at the end of ``path``; an empty ``text``
    removes the block (and the file, when nothing else is left)."""
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    kept = _strip_block(existing)
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


def _strip_block(text: str) -> str:
    out: list[str] = []
    inside = False
    for line in text.splitlines(keepends=True):
        stripped = line.rstrip("\n")
        if stripped == BEGIN:
            inside = True
            continue
        if inside and stripped == END:
            inside = False
            continue
        if not inside:
            out.append(line)
    return "".join(out)


def unlink(repo: Path) -> WriteReport:
    """Remove exactly what ``write_bazel``/``write_buck2`` wrote."""
    report = WriteReport()
    for path in (
        repo / "lre.bazelrc",
        repo / ".buckconfig.d" / "lre.buckconfig",
        repo / "lre_platforms" / "BUCK",
        repo / "lre_platforms" / "defs.bzl",
    ):
        if _owned(path):
            path.unlink()
            report.removed.append(path)
    for directory in (repo / ".buckconfig.d", repo / "lre_platforms"):
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
            report.removed.append(directory)
    bazelrc = repo / ".bazelrc"
    if bazelrc.exists():
        lines = bazelrc.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [ln for ln in lines if ln.rstrip("\n") not in (BAZELRC_COMMENT, TRY_IMPORT)]
        if kept != lines:
            if kept:
                bazelrc.write_text("".join(kept), encoding="utf-8")
            else:
                bazelrc.unlink()
            report.removed.append(bazelrc)
    _write_local_block(repo / ".buckconfig.local", "", report)
    return report
