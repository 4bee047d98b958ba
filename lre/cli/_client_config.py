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
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from lre.cli._bazelrc_import import (
    OPT_IN_KEPT,
    TRY_IMPORT,
    USER_BAZELRC,
    add_import,
    import_target,
    only_lre_lines,
    opted_in,
    remove_import,
    without_default_on,
)
from lre.cli._buckconfig import (
    BuckConfig,
    BuckConfigError,
    canonical_label,
    read_buckconfig,
    read_lines,
    root_cell_name,
    runs_only_locally,
)

MARKER = "# Written by `lre up`; `lre unlink` removes it. Do not edit: it is rewritten."
BEGIN = "# >>> lre (written by `lre up`; `lre unlink` removes this block) >>>"
#: What older lre versions wrote as ``BEGIN`` (recognised, never written: it
#: named --buck-local also when that flag was not given).
OLD_BEGINS = ("# >>> lre (written by `lre up --buck-local`; `lre unlink` removes this block) >>>",)
#: Buck2's build file name when ``[buildfile] name`` does not say.
DEFAULT_BUILDFILE = "BUCK"
END = "# <<< lre <<<"

REPO_MARKERS = ("MODULE.bazel", "WORKSPACE", "WORKSPACE.bazel", ".buckconfig", ".git")

#: Bazel version assumed when ``bazel --version`` prints no number (Debian's
#: bazel-bootstrap prints "bazel no_version"; it is 4.2.3).
UNVERSIONED_BAZEL = (4, 2, 3)


class ClientConfigError(Exception):
    """A file lre would write exists and is not lre's, or a repo is not found."""


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """What the generated client files point at, and how to talk to it."""

    host: str
    port: int
    instance_name: str = "main"
    cpus: int = field(default_factory=lambda: os.cpu_count() or 2)
    #: Sent with every action (None or empty: none, so the repository's own
    #: flags decide the platform; ``lre.config.client_exec_properties`` says
    #: what ``lre up`` records: only what ``client.exec_properties`` sets).
    exec_properties: tuple[tuple[str, str], ...] | None = None
    #: The listener speaks TLS; ``tls_ca_file`` is the PEM the client trusts.
    tls: bool = False
    tls_ca_file: str = ""
    #: The listener asks for client certificates (mutual TLS).
    tls_client_auth: bool = False
    #: Bearer token clients send as ``authorization: Bearer <token>`` ("" = none).
    auth_token: str = ""
    #: Path of a Unix socket; when set, ``host`` and ``port`` are not used.
    unix_socket: str = ""

    @property
    def host_port(self) -> str:
        """``host:port``, an IPv6 host in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def bazel_endpoint(self) -> str:
        """The ``--remote_executor`` value: ``unix:``, ``grpcs://`` or ``grpc://``."""
        if self.unix_socket:
            return f"unix://{self.unix_socket}"
        return f"{'grpcs' if self.tls else 'grpc'}://{self.host_port}"

    @property
    def location(self) -> str:
        """Where lre listens, for comments and messages."""
        return f"unix:{self.unix_socket}" if self.unix_socket else self.host_port


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
    """The content of ``lre.bazelrc`` for the given Bazel version (None: not found).

    All flags sit under ``build:lre``; a final ``build --config=lre`` makes
    lre the default, and a user who wants it opt-in deletes that one line.
    Flags newer than the installed Bazel are left out. No line is a build
    option or changes an action's key (the cache contract in
    docs/configuration.md): no ``--incompatible_strict_action_env``, no
    ``--remote_download_*`` (4.2.3 expands ``--remote_download_toplevel`` into
    C++ options, and it builds without the bytes, which Bazel 4.2.3 cannot
    recover from once a blob goes: docs/benchmarks.md measured what fetching
    every output costs), and platform properties only when
    ``client.exec_properties`` names them.

    ``bazel build --config=lre`` with the default line in place expands the
    config twice. Every flag here takes the last value given, except
    ``--remote_default_exec_properties``, which Bazel (4.2.3 at least) turns
    into a map that dies on a repeated key ("Multiple entries with same
    key"); so before Bazel 9 the properties go in the single-valued
    ``--remote_default_platform_properties`` (Bazel 9 deleted that flag).
    """
    v = version or UNVERSIONED_BAZEL
    jobs = max(16, 8 * settings.cpus)
    if version is None:
        found = (
            f"# Bazel was not found on PATH: flags for Bazel {'.'.join(map(str, v))} are "
            "written; run `lre link` once Bazel is installed."
        )
    else:
        found = f"# Bazel {'.'.join(map(str, v))} found; flags it does not know are left out."
    properties = dict(settings.exec_properties or ())
    lines = [
        MARKER,
        f"# lre at {settings.location}, instance {settings.instance_name!r}.",
        found,
        "# Every line says where actions run, none what they are: no build option (a",
        "# toggle would discard Bazel's analysis cache) and nothing that enters an",
        "# action's key (environment, platform, arguments), so actions keep the keys",
        "# the repository's own flags give them (docs/configuration.md, cache contract).",
        f"build:lre --remote_executor={settings.bazel_endpoint}",
        f"build:lre --remote_instance_name={settings.instance_name}",
        *_bazel_properties(properties, platform_flag=v < (9, 0, 0)),
        *_bazel_connection_flags(settings),
        "# lre does the admission control, so Bazel may send many actions at once.",
        f"build:lre --jobs={jobs}",
        "build:lre --remote_timeout=600",
        "build:lre --spawn_strategy=remote,sandboxed,local",
    ]
    if v >= (7, 0, 0):
        lines.append("build:lre --remote_cache_compression")
    elif v >= (5, 0, 0):
        lines.append("build:lre --experimental_remote_cache_compression")
    if (6, 2, 0) <= v < (8, 0, 0):
        # From 6.2 Bazel can rerun a build whose remote inputs went missing;
        # 8.0 made 5 the default.
        lines.append("build:lre --experimental_remote_cache_eviction_retries=5")
    lines += [
        "",
        "# Delete this line to make lre opt-in (`bazel build --config=lre`).",
        "build --config=lre",
        "",
    ]
    return "\n".join(lines)


def _bazel_properties(properties: dict[str, str], *, platform_flag: bool) -> list[str]:
    """Default exec properties as bazelrc lines (see ``bazelrc_text`` for the flag
    choice); none at all for no properties."""
    if not properties:
        return []
    if not platform_flag:
        flag = "build:lre --remote_default_exec_properties"
        return [f"{flag}={k}={v}" for k, v in properties.items()]
    entries = " ".join(f"properties:{{name:'{k}' value:'{v}'}}" for k, v in properties.items())
    return [
        "# Bazel calls this flag deprecated; unlike --remote_default_exec_properties it",
        "# survives `--config=lre` given twice (see docs/quickstart-bazel.md).",
        f'build:lre --remote_default_platform_properties="{entries}"',
    ]


def _bazel_connection_flags(settings: ClientSettings) -> list[str]:
    """TLS and authentication flags the listener asks for."""
    lines: list[str] = []
    if settings.tls and settings.tls_ca_file:
        lines += [
            "# The listener's certificate is trusted as is. If a CA signed it, a line",
            "# `build --tls_certificate=CA.pem` after the try-import survives a new one.",
            f"build:lre --tls_certificate={settings.tls_ca_file}",
        ]
    if settings.tls_client_auth:
        lines.append(
            "# The listener wants a client certificate: add --tls_client_certificate "
            "and --tls_client_key to your own .bazelrc."
        )
    if settings.auth_token:
        lines.append(f'build:lre --remote_header="authorization=Bearer {settings.auth_token}"')
    return lines


INERT_BAZELRC = "\n".join(
    [
        MARKER,
        "# lre is stopped (`lre down`), so this file sets nothing and Bazel builds locally.",
        "# `lre up` (or `lre link` while lre runs) fills it in again.",
        "",
    ]
)


def buckconfig_text(settings: ClientSettings, platforms: str | None) -> str:
    """The content of ``.buckconfig.d/lre.buckconfig`` (or the local block).

    Buck2 takes only ``grpc://`` addresses and turns TLS on with ``tls``.
    """
    address = f"grpc://{settings.host_port}"
    lines = [
        "[buck2_re_client]",
        f"engine_address = {address}",
        f"cas_address = {address}",
        f"action_cache_address = {address}",
        f"tls = {'true' if settings.tls else 'false'}",
    ]
    if settings.tls and settings.tls_ca_file:
        lines.append(f"tls_ca_certs = {settings.tls_ca_file}")
    if settings.auth_token:
        lines.append(f"http_headers = authorization: Bearer {settings.auth_token}")
    lines.append(f"instance_name = {settings.instance_name}")
    if platforms is not None:
        lines += ["", "[build]", f"execution_platforms = {platforms}"]
    return "\n".join(lines) + "\n"


INERT_BUCKCONFIG = (
    "# lre is stopped (`lre down`), so this file sets nothing and Buck2 builds locally.\n"
    "# `lre up` (or `lre link` while lre runs) fills it in again; then run `buck2 kill`.\n"
)


def _opted_in(path: Path) -> bool:
    """Whether lre's ``path`` (``lre.bazelrc``) was made opt-in by its user."""
    return _owned(path) and opted_in(path.read_text(encoding="utf-8"))


def _owned(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as f:
            return f.readline().rstrip("\n") == MARKER
    except OSError:
        return False


def _write_owned(path: Path, text: str, report: WriteReport, *, private: bool = False) -> None:
    """Replace ``path`` (lre's own, or missing) with ``text``; 0600 when ``private``."""
    if path.exists() and not _owned(path):
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


def write_bazel(
    repo: Path,
    settings: ClientSettings,
    *,
    edit_bazelrc: bool,
    version: tuple[int, int, int] | None,
    home: Path | None = None,
) -> WriteReport:
    """Write ``lre.bazelrc`` and (when ``edit_bazelrc``) the try-import line,
    into the file ``_bazelrc_import.import_target`` picks (``home``: the
    user's home directory, default ``Path.home()``)."""
    report = WriteReport()
    text = bazelrc_text(settings, version)
    if _opted_in(repo / "lre.bazelrc"):
        text = without_default_on(text)
    _write_owned(repo / "lre.bazelrc", text, report, private=bool(settings.auth_token))
    if settings.auth_token:
        report.warnings.append(f"{repo / 'lre.bazelrc'} holds the listener's token (mode 0600)")
    if settings.tls:
        report.warnings.append(
            "Bazel builds without netty-tcnative (Debian's bazel-bootstrap among them) cannot "
            'speak TLS: "JDK provider does not support ALPN protocol"'
        )
    if settings.unix_socket:
        report.warnings.append(
            "Bazel builds without netty's epoll (Debian's bazel-bootstrap among them) stop "
            'with "Unix domain sockets are unsupported on this platform"; give lre a TCP '
            "listener (with auth_token_file) for those"
        )
    target, why = import_target(repo, Path.home() if home is None else home)
    if target is None:
        return report
    if not edit_bazelrc:
        report.warnings.append(
            f"add `{TRY_IMPORT}` to {target} (or pass --bazelrc=lre.bazelrc) to use lre"
        )
        return report
    add_import(target)
    report.imported_from.append(target)
    if why:
        report.warnings.append(f"{why}: Bazel reads lre.bazelrc through {target}")
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
    if settings.unix_socket:
        report.warnings.append(
            "Buck2 cannot reach a Unix socket; give lre a TCP listener for Buck2 "
            "(Buck2 config not written)"
        )
        return report
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
            _copy_platform(
                repo, platform_source, report, _buildfile_name(user), _constraints_cell(user)
            )
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
    if settings.auth_token:
        report.warnings.append("the Buck2 config holds the listener's token (mode 0600)")
    text = buckconfig_text(settings, platform_here)
    dropin = repo / ".buckconfig.d" / "lre.buckconfig"
    if local:
        block = buckconfig_text(settings, platform_here or platform_local)
        _write_local_block(repo / ".buckconfig.local", block, report)
        if _owned(dropin):
            dropin.unlink()
            report.removed.append(dropin)
    else:
        _write_owned(dropin, MARKER + "\n" + text, report, private=bool(settings.auth_token))
        block = "" if platform_local is None else _platform_section(platform_local)
        _write_local_block(repo / ".buckconfig.local", block, report)
    _warn_overridden(repo, home, text + block, report)
    report.warnings.append("run `buck2 kill` so the Buck2 daemon reads the new RE settings")
    return report


def _platform_section(platform: str) -> str:
    return f"[build]\nexecution_platforms = {platform}\n"


def _buildfile_name(config: BuckConfig) -> str:
    """The build file name Buck2 reads in this repository: the first of
    ``[buildfile] name_v2``, else ``name`` (a comma-separated list), else BUCK."""
    for key in ("name_v2", "name"):
        winner = config.winner("buildfile", key)
        if winner is not None:
            first = winner.value.split(",")[0].strip()
            if first:
                return first
    return DEFAULT_BUILDFILE


def _constraints_cell(config: BuckConfig) -> str:
    """The cell holding the host constraints (``os:linux``, ``cpu:x86_64``):
    ``config`` when the repository names it (``buck2 init`` aliases it to the
    prelude), else ``prelude``."""
    for section in ("cells", "cell_aliases", "repositories"):
        if config.section(section).get("config") is not None:
            return "config"
    return "prelude"


def _copy_platform(
    repo: Path, platform_source: Path, report: WriteReport, buildfile: str, constraints_cell: str
) -> None:
    """Copy lre's platform into ``lre_platforms/``, its BUCK file named ``buildfile``
    and its host constraints in ``constraints_cell``; an owned build file of
    another name (written before) is removed."""
    target = repo / "lre_platforms"
    for source, name in (("BUCK", buildfile), ("defs.bzl", "defs.bzl")):
        src = (platform_source / source).read_text(encoding="utf-8")
        if source == "BUCK":
            src = src.replace('"config//', f'"{constraints_cell}//')
        body = src if src.startswith(MARKER) else MARKER + "\n" + src
        _write_owned(target / name, body, report)
    for stale in sorted(target.iterdir()):
        if stale.name not in (buildfile, "defs.bzl") and _owned(stale):
            stale.unlink()
            report.removed.append(stale)


def _block_lines(lines: list[str]) -> range:
    """1-based line numbers of lre's block in ``.buckconfig.local`` lines."""
    begin = end = 0
    for number, line in enumerate(lines, start=1):
        if (line == BEGIN or line in OLD_BEGINS) and not begin:
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
    if "http_headers" in text:
        path.chmod(0o600)


def _strip_block(text: str) -> str:
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


def unlink(repo: Path) -> WriteReport:
    """Remove exactly what ``write_bazel``/``write_buck2`` wrote."""
    report = WriteReport()
    platforms = repo / "lre_platforms"
    platform_files = sorted(platforms.iterdir()) if platforms.is_dir() else []
    for path in (repo / "lre.bazelrc", repo / ".buckconfig.d" / "lre.buckconfig", *platform_files):
        if _owned(path):
            path.unlink()
            report.removed.append(path)
    for directory in (repo / ".buckconfig.d", repo / "lre_platforms"):
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
            report.removed.append(directory)
    for rc in (repo / ".bazelrc", repo / USER_BAZELRC):
        done = remove_import(rc)
        if done == "deleted":
            report.removed.append(rc)
        elif done == "edited":
            report.cleaned.append(rc)
    _write_local_block(repo / ".buckconfig.local", "", report)
    return report


def client_config_files(repo: Path) -> list[Path]:
    """The files of ``repo`` holding lre's client config (live or inert)."""
    files = [
        path
        for path in (repo / "lre.bazelrc", repo / ".buckconfig.d" / "lre.buckconfig")
        if _owned(path)
    ]
    local = repo / ".buckconfig.local"
    if local.is_file() and _block_lines(local.read_text(encoding="utf-8").splitlines()):
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
            kept = OPT_IN_KEPT + "\n" if _opted_in(path) else ""
            _write_owned(path, INERT_BAZELRC + kept, report)
        elif path.name == ".buckconfig.local":
            _write_local_block(path, INERT_BUCKCONFIG, report)
        else:
            _write_owned(path, MARKER + "\n" + INERT_BUCKCONFIG, report)
    return report


def owned_paths(repo: Path) -> list[Path]:
    """Files and directories in ``repo`` that lre wrote and the user did not.

    ``.bazelrc`` and ``.buckconfig.local`` count only when nothing but lre's
    lines are in them (lre created them).
    """
    paths = [p for p in client_config_files(repo) if p.name != ".buckconfig.local"]
    platforms = repo / "lre_platforms"
    if platforms.is_dir() and all(_owned(p) for p in platforms.iterdir()):
        paths.append(platforms)
    paths += [rc for rc in (repo / ".bazelrc", repo / USER_BAZELRC) if only_lre_lines(rc)]
    local = repo / ".buckconfig.local"
    if local.is_file():
        text = local.read_text(encoding="utf-8")
        if text != _strip_block(text) and not _strip_block(text).strip():
            paths.append(local)
    return paths
