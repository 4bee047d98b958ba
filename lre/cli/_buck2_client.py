"""Buck2's side of the client configuration.

The RE client keys go into ``.buckconfig.d/lre.buckconfig`` (a whole file
lre owns) or lre's block in ``.buckconfig.local``; lre's execution platform,
when Buck2 would otherwise run everything locally, into ``lre_platforms/``.
"""

from __future__ import annotations

import re
from pathlib import Path

from lre.cli._bazel_client import repository_id
from lre.cli._buckconfig import (
    BuckConfig,
    BuckConfigError,
    canonical_label,
    read_buckconfig,
    read_lines,
    root_cell_name,
    runs_only_locally,
)
from lre.cli._client_files import (
    MARKER,
    ClientConfigError,
    WriteReport,
    block_lines,
    owned_by_lre,
    write_local_block,
    write_owned,
)
from lre.cli._client_settings import ClientSettings

#: lre's header naming the repository (read by ``lre.service``).
REPOSITORY_HEADER = "x-lre-repository"
#: What a header value Buck2 is given may hold (no ``,``, ``$`` or spaces).
_HEADER_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")

#: Buck2's build file name when ``[buildfile] name`` does not say.
DEFAULT_BUILDFILE = "BUCK"


def buckconfig_text(settings: ClientSettings, platforms: str | None, repository: str = "") -> str:
    """The content of ``.buckconfig.d/lre.buckconfig`` (or the local block).

    Buck2 takes only ``grpc://`` addresses and turns TLS on with ``tls``.
    ``repository`` (``_bazel_client.repository_id``) goes out as the
    ``x-lre-repository`` header, which only names the learner's history
    (Buck2 sends no target, so without it two repositories' actions of one
    command shape would share one); "" leaves it out. Buck2 reads
    ``http_headers`` as one comma-separated list of ``Name: Value`` and
    substitutes ``$VAR`` in it, so the name is kept to ``A-Za-z0-9._+-``.
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
    headers = []
    if settings.auth_token:
        headers.append(f"authorization: Bearer {settings.auth_token}")
    label = _HEADER_UNSAFE.sub("_", repository)
    if label:
        headers.append(f"{REPOSITORY_HEADER}: {label}")
    if headers:
        lines.append(f"http_headers = {', '.join(headers)}")
    lines.append(f"instance_name = {settings.instance_name}")
    if platforms is not None:
        lines += ["", "[build]", f"execution_platforms = {platforms}"]
    return "\n".join(lines) + "\n"


INERT_BUCKCONFIG = (
    "# lre is stopped (`lre down`), so this file sets nothing and Buck2 builds locally.\n"
    "# `lre up` (or `lre link` while lre runs) fills it in again; then run `buck2 kill`.\n"
)


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
    repository = repository_id(repo)
    text = buckconfig_text(settings, platform_here, repository)
    dropin = repo / ".buckconfig.d" / "lre.buckconfig"
    if local:
        block = buckconfig_text(settings, platform_here or platform_local, repository)
        write_local_block(repo / ".buckconfig.local", block, report)
        if owned_by_lre(dropin):
            dropin.unlink()
            report.removed.append(dropin)
    else:
        write_owned(dropin, MARKER + "\n" + text, report, private=bool(settings.auth_token))
        block = "" if platform_local is None else _platform_section(platform_local)
        write_local_block(repo / ".buckconfig.local", block, report)
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
        write_owned(target / name, body, report)
    for stale in sorted(target.iterdir()):
        if stale.name not in (buildfile, "defs.bzl") and owned_by_lre(stale):
            stale.unlink()
            report.removed.append(stale)


def _lines_without_lre(path: Path) -> list[str] | None:
    """A Buck2 config file's lines as the user wrote them: lre's own files
    read as empty, lre's block in ``.buckconfig.local`` as blank lines."""
    lines = read_lines(path)
    if lines is None:
        return None
    if lines and lines[0] == MARKER:
        return []
    block = block_lines(lines)
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
        if winner.file == local and winner.line in block_lines(local_lines):
            continue
        report.warnings.append(
            f"{winner.where(repo)} sets [{section}] {key} = {winner.value}, which overrides "
            "lre's setting, so Buck2 will not use lre for it: remove that line"
            + ("" if winner.file == local else ", or rerun `lre up --buck-local`")
        )
