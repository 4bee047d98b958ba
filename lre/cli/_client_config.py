"""Write (and remove) the client configuration that points Bazel and Buck2 at lre.

Everything lre writes into a user's repository is marked so that ``lre unlink``
removes exactly that and nothing else:

- ``lre.bazelrc``: a whole file lre owns (first line is ``MARKER``);
- ``.bazelrc``: two lines, the marker comment and ``try-import
  %workspace%/lre.bazelrc``;
- ``.buckconfig.d/lre.buckconfig``: a whole file lre owns;
- ``.buckconfig.local`` (only with ``--buck-local``): a block between
  ``BEGIN``/``END`` marker lines;
- ``lre_platforms/`` (only when the repo names no Buck2 execution platform):
  a directory lre owns, holding the platform rule from ``toolchains/buck2``.

Functions never overwrite a file lre did not write; they raise
``ClientConfigError`` naming the file instead.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

MARKER = "# Written by `lre up`; `lre unlink` removes it. Do not edit: it is rewritten."
BEGIN = "# >>> lre (written by `lre up --buck-local`; `lre unlink` removes this block) >>>"
END = "# <<< lre <<<"
TRY_IMPORT = "try-import %workspace%/lre.bazelrc"
BAZELRC_COMMENT = "# Added by `lre up`: use lre for remote execution (`lre unlink` removes it)."

REPO_MARKERS = ("MODULE.bazel", "WORKSPACE", "WORKSPACE.bazel", ".buckconfig", ".git")
BUCK_KEYS = ("engine_address", "cas_address", "action_cache_address", "tls", "instance_name")

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
    #: Sent with every action; None = ``cpu_count=1`` and ``OSFamily=os_family``
    #: (``lre.config.client_exec_properties`` decides what ``lre up`` passes).
    exec_properties: tuple[tuple[str, str], ...] | None = None


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
    properties = settings.exec_properties
    if properties is None:
        properties = (("cpu_count", "1"), ("OSFamily", settings.os_family))
    lines = [
        MARKER,
        f"# lre at {settings.host}:{settings.port}, instance {settings.instance_name!r}.",
        f"# Bazel {'.'.join(map(str, v))} detected; newer-only flags are omitted.",
        f"build:lre --remote_executor=grpc://{settings.host}:{settings.port}",
        f"build:lre --remote_instance_name={settings.instance_name}",
        *(f"build:lre --remote_default_exec_properties={k}={v}" for k, v in properties),
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


def _read_buckconfig(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    if path.exists():
        try:
            parser.read_string(path.read_text(encoding="utf-8"))
        except configparser.Error:
            pass
    return parser


def _root_cell_name(repo: Path) -> str:
    parser = _read_buckconfig(repo / ".buckconfig")
    for section in ("cells", "repositories"):
        if parser.has_section(section):
            for name, value in parser.items(section):
                if value.strip() in (".", "./", ""):
                    return name
    return "root"


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
    repo: Path, settings: ClientSettings, *, local: bool, platform_source: Path | None
) -> WriteReport:
    """Write the Buck2 RE client config, and a platform when the repo names none.

    With ``local`` the block goes into ``.buckconfig.local`` (which beats
    ``.buckconfig``); otherwise into ``.buckconfig.d/lre.buckconfig`` and a
    warning names any key of ``.buckconfig`` that would override it.
    """
    report = WriteReport()
    base = _read_buckconfig(repo / ".buckconfig")
    platforms: str | None = None
    has_platforms = base.has_option("build", "execution_platforms")
    if not has_platforms and platform_source is not None:
        target_dir = repo / "lre_platforms"
        for name in ("BUCK", "defs.bzl"):
            src = (platform_source / name).read_text(encoding="utf-8")
            body = src if src.startswith(MARKER) else MARKER + "\n" + src
            _write_owned(target_dir / name, body, report)
        platforms = f"{_root_cell_name(repo)}//lre_platforms:lre"
    text = buckconfig_text(settings, platforms)
    if local:
        _write_local_block(repo / ".buckconfig.local", text, report)
    else:
        _write_owned(repo / ".buckconfig.d" / "lre.buckconfig", MARKER + "\n" + text, report)
        clashes = [k for k in BUCK_KEYS if base.has_option("buck2_re_client", k)]
        if clashes:
            report.warnings.append(
                ".buckconfig sets [buck2_re_client] "
                + ", ".join(clashes)
                + ", which overrides .buckconfig.d/; rerun with --buck-local to write "
                "them into .buckconfig.local instead"
            )
    report.warnings.append("run `buck2 kill` so the Buck2 daemon reads the new RE settings")
    return report


def _write_local_block(path: Path, text: str, report: WriteReport) -> None:
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    kept = _strip_block(existing)
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
    local = repo / ".buckconfig.local"
    if local.exists():
        text = local.read_text(encoding="utf-8")
        stripped = _strip_block(text)
        if stripped != text:
            if stripped.strip():
                local.write_text(stripped, encoding="utf-8")
            else:
                local.unlink()
            report.removed.append(local)
    return report
