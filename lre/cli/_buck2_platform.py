"""Can Buck2's execution platform in a repository run actions remotely?

A minimal reader, kept behind one function (``execution_platform_check``)
so a complete Buck2 configuration reader can replace ``buck2_setting``:
it merges ``.buckconfig.d/*`` (sorted), then ``.buckconfig``, then
``.buckconfig.local``, later files winning per key (Buck2's order in the
root cell), and does not follow ``<file:...>`` includes or read the files
outside the repository (/etc, ~).

The verdict is by name: ``<cell>//lre_platforms:lre`` is the platform
``lre up`` installs from toolchains/buck2 (remote enabled);
``prelude//platforms:default``, which ``buck2 init`` writes, has remote
execution off; any other platform is the user's, and lre cannot tell from
its name whether its executor enables remote execution.
"""

from __future__ import annotations

import configparser
from pathlib import Path

from lre.cli._checks import Check

LRE_PLATFORM = "//lre_platforms:lre"
LOCAL_ONLY_PLATFORMS = ("prelude//platforms:default",)


def _config_files(repo: Path) -> list[Path]:
    drop_in = repo / ".buckconfig.d"
    extra = sorted(p for p in drop_in.iterdir() if p.is_file()) if drop_in.is_dir() else []
    return [*extra, repo / ".buckconfig", repo / ".buckconfig.local"]


def buck2_setting(repo: Path, section: str, key: str) -> tuple[str, Path] | None:
    """The value of ``[section] key`` Buck2 would use, and the file it comes
    from; None when no file sets it. Unreadable or malformed files are skipped."""
    found: tuple[str, Path] | None = None
    for path in _config_files(repo):
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            parser.read_string(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, configparser.Error):
            continue
        if parser.has_option(section, key):
            found = (parser.get(section, key).strip(), path)
    return found


def execution_platform_check(repo: Path) -> Check:
    """The ``buck2 platform`` check of ``lre doctor``."""
    name = "buck2 platform"
    setting = buck2_setting(repo, "build", "execution_platforms")
    local = repo / ".buckconfig.local"
    fix = (
        f"run `lre up` in {repo} (it installs lre_platforms/ from toolchains/buck2), then set "
        f"`[build] execution_platforms = <your root cell>{LRE_PLATFORM}` in {local}"
    )
    if setting is None:
        return Check(
            name, "FAIL", "no [build] execution_platforms: Buck2 runs every action locally", fix
        )
    value, source = setting
    if value.endswith(LRE_PLATFORM):
        return Check(name, "OK", f"{value} (from {source}) runs actions on lre")
    if value in LOCAL_ONLY_PLATFORMS:
        return Check(
            name,
            "FAIL",
            f"{value} (from {source}) has remote execution off: Buck2 builds locally",
            fix,
        )
    return Check(
        name,
        "WARN",
        f"{value} (from {source}) is your own platform; lre cannot tell whether it "
        "enables remote execution",
        "make sure its CommandExecutorConfig sets remote_enabled = True "
        "(toolchains/buck2/defs.bzl shows one that does)",
    )
