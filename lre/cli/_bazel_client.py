"""Bazel's side of the client configuration: ``lre.bazelrc`` and its try-import.

``lre.bazelrc`` is a whole file lre owns; the ``try-import`` line goes into
the file ``_bazelrc_import`` picks. Flags follow the installed Bazel's
version (``detect_bazel_version``).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

from lre.cli._bazelrc_import import (
    TRY_IMPORT,
    add_import,
    import_target,
    opted_in,
    without_default_on,
)
from lre.cli._client_files import MARKER, WriteReport, owned_by_lre, write_owned
from lre.cli._client_settings import ClientSettings
from lre.cli._team_cache import link_notes, remote_settings

#: Bazel version assumed when ``bazel --version`` prints no number (Debian's
#: bazel-bootstrap prints "bazel no_version"; it is 4.2.3).
UNVERSIONED_BAZEL = (4, 2, 3)


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


def repository_id(repo: Path) -> str:
    """A stable name for the repository at ``repo``: its directory name and 8
    hex of a hash of its resolved path (two checkouts of one project get two
    names; the same checkout always the same one)."""
    resolved = repo.resolve()
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:8]
    return f"{resolved.name or 'root'}-{digest}"


def bazelrc_text(
    settings: ClientSettings,
    version: tuple[int, int, int] | None,
    repository: str = "",
    *,
    google_credentials_off: bool = False,
) -> str:
    """The content of ``lre.bazelrc`` for the given Bazel version (None: not
    found); docs/quickstart-bazel.md says why each flag is there.

    ``repository`` (``repository_id``), when given, is sent as the
    ``x-lre-repository`` header with every call. ``google_credentials_off``
    (the repository turns ``--google_default_credentials`` on) adds
    ``--nogoogle_default_credentials``. What must hold for every line: it says
    where actions run, never what they are (no build option, nothing that
    enters an action's key: the cache contract in docs/configuration.md); a
    flag newer than the installed Bazel is left out; and each flag takes the
    last value given, since ``--config=lre`` with the default line in place
    expands the config twice (so the platform properties go in the
    single-valued ``--remote_default_platform_properties`` before Bazel 9).
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
        "# Empty: the cache is lre too, even when the repository names its own (a team",
        "# cache, see docs/upstream.md); Bazel would otherwise upload inputs there.",
        "build:lre --remote_cache=",
        f"build:lre --remote_instance_name={settings.instance_name}",
        *(
            ["build:lre --nogoogle_default_credentials"]
            if google_credentials_off and not settings.tls
            else []
        ),
        *_repository_header(repository, v),
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


def _repository_header(repository: str, version: tuple[int, int, int]) -> list[str]:
    """The ``x-lre-repository`` header line (none without a repository, or for
    a Bazel older than 4, where lre has not checked the flag)."""
    if not repository or version < (4, 0, 0):
        return []
    return [
        "# Names this repository to lre (its builds, its learned reservations) on every",
        "# call, cache lookups too; a header, so no action key changes.",
        f"build:lre --remote_header=x-lre-repository={repository}",
    ]


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


def lre_bazelrc_opted_in(path: Path) -> bool:
    """Whether lre's ``path`` (``lre.bazelrc``) was made opt-in by its user."""
    return owned_by_lre(path) and opted_in(path.read_text(encoding="utf-8"))


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
    home = Path.home() if home is None else home
    found = remote_settings(repo, home)
    credentials = any(s.flag == "google_default_credentials" and s.value == "true" for s in found)
    text = bazelrc_text(settings, version, repository_id(repo), google_credentials_off=credentials)
    if lre_bazelrc_opted_in(repo / "lre.bazelrc"):
        text = without_default_on(text)
    write_owned(repo / "lre.bazelrc", text, report, private=bool(settings.auth_token))
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
    target, why = import_target(repo, home)
    if target is None:
        report.warnings += link_notes(remote_settings(repo, home))
        return report
    if not edit_bazelrc:
        report.warnings.append(
            f"add `{TRY_IMPORT}` to {target} (or pass --bazelrc=lre.bazelrc) to use lre"
        )
        report.warnings += link_notes(found)
        return report
    add_import(target)
    report.imported_from.append(target)
    if why:
        report.warnings.append(f"{why}: Bazel reads lre.bazelrc through {target}")
    report.warnings += link_notes(remote_settings(repo, home))
    return report
