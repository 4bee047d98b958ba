"""Can Buck2's execution platform in a repository run actions remotely?

The configuration is read as Buck2 reads it (``lre.cli._buckconfig``: the
files in /etc and ~, ``.buckconfig.d/``, ``.buckconfig``,
``.buckconfig.local``, includes). The verdict is by name:
``<root cell>//lre_platforms:lre`` is the platform ``lre up`` installs from
toolchains/buck2 (remote enabled); a platform known to run only locally
(``prelude//platforms:default``, which ``buck2 init`` writes) fails; any
other platform is the user's, and lre cannot tell from its name whether its
executor enables remote execution.
"""

from __future__ import annotations

from pathlib import Path

from lre.cli._buckconfig import (
    BuckConfigError,
    canonical_label,
    read_buckconfig,
    root_cell_name,
    runs_only_locally,
)
from lre.cli._checks import Check


def execution_platform_check(repo: Path) -> Check:
    """The ``buck2 platform`` check of ``lre doctor``."""
    name = "buck2 platform"
    try:
        config = read_buckconfig(repo)
    except BuckConfigError as error:
        return Check(
            name, "FAIL", f"Buck2 cannot read this configuration: {error}", "fix that line"
        )
    lre_platform = f"{root_cell_name(config)}//lre_platforms:lre"
    local = repo / ".buckconfig.local"
    fix = (
        f"run `lre up` in {repo} (it installs lre_platforms/ from toolchains/buck2 and names "
        f"it), or set `[build] execution_platforms = {lre_platform}` in {local} yourself"
    )
    setting = config.winner("build", "execution_platforms")
    if setting is None:
        return Check(
            name, "FAIL", "no [build] execution_platforms: Buck2 runs every action locally", fix
        )
    where = f"{setting.value} (from {setting.where(repo)})"
    if canonical_label(config, setting.value) == canonical_label(config, lre_platform):
        return Check(name, "OK", f"{where} runs actions on lre")
    if runs_only_locally(config, setting.value):
        return Check(name, "FAIL", f"{where} has remote execution off: Buck2 builds locally", fix)
    return Check(
        name,
        "WARN",
        f"{where} is your own platform; lre cannot tell whether it enables remote execution",
        "make sure its CommandExecutorConfig sets remote_enabled = True "
        "(toolchains/buck2/defs.bzl shows one that does)",
    )
