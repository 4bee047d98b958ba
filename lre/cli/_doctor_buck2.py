"""``lre doctor``'s Buck2 checks: where Buck2 sends actions, and on which platform.

The configuration is read once, as Buck2 reads it (``lre.cli._buckconfig``:
the files in /etc and ~, ``.buckconfig.d/``, ``.buckconfig``,
``.buckconfig.local``, includes); a configuration Buck2 would refuse is one
FAIL naming the file and line.

- ``buck2 config``: the ``[buck2_re_client] engine_address`` in effect is
  where the running lre listens (a ``.buckconfig.d/lre.buckconfig`` that sets
  nothing while lre is stopped, as ``lre down`` leaves it, is fine);
- ``buck2 platform``: judged by name: ``<root cell>//lre_platforms:lre`` is
  the platform ``lre up`` installs from toolchains/buck2 (remote enabled); a
  platform known to run only locally (``prelude//platforms:default``, which
  ``buck2 init`` writes) fails; any other is the user's, and lre cannot tell
  from its name whether its executor enables remote execution.
"""

from __future__ import annotations

from pathlib import Path

from lre.cli._buckconfig import (
    BuckConfig,
    BuckConfigError,
    canonical_label,
    read_buckconfig,
    root_cell_name,
    runs_only_locally,
)
from lre.cli._checks import Check
from lre.cli._client_target import points_at
from lre.cli._daemon import RunningServer


def buck2_checks(repo: Path, server: RunningServer | None) -> list[Check]:
    """The ``buck2 config`` and ``buck2 platform`` checks of ``repo``."""
    try:
        config = read_buckconfig(repo)
    except BuckConfigError as error:
        return [
            Check(
                "buck2 config",
                "FAIL",
                f"Buck2 cannot read this configuration: {error}",
                "correct that line",
            )
        ]
    return [engine_check(repo, config, server), execution_platform_check(repo, config)]


def engine_check(repo: Path, config: BuckConfig, server: RunningServer | None) -> Check:
    name = "buck2 config"
    engine = config.winner("buck2_re_client", "engine_address")
    lre_file = repo / ".buckconfig.d" / "lre.buckconfig"
    if engine is not None:
        return points_at(name, Path(engine.where(repo)), engine.value, server, repo)
    if server is None and lre_file.exists():
        return Check(
            name, "OK", f"{lre_file} sets nothing while lre is stopped: Buck2 builds locally"
        )
    return Check(
        name,
        "FAIL",
        "no [buck2_re_client] engine_address in Buck2's configuration: Buck2 builds locally",
        f"run `lre up` in {repo}, then `buck2 kill`",
    )


def execution_platform_check(repo: Path, config: BuckConfig) -> Check:
    name = "buck2 platform"
    lre_platform = f"{root_cell_name(config)}//lre_platforms:lre"
    fix = (
        f"run `lre up` in {repo} (it installs lre_platforms/ from toolchains/buck2 and names "
        f"it), or set `[build] execution_platforms = {lre_platform}` in "
        f"{repo / '.buckconfig.local'} yourself"
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
