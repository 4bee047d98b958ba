"""The files ``buck2 init`` writes, for tests (Buck2 cannot be installed here).

Taken from Buck2's sources, ``app/buck2_client/src/commands/init.rs``
(facebook/buck2 at 13baa8a1, August 2026): ``initialize_buckconfig`` with the
prelude (the default; ``--git`` adds ``[project] ignore = .git``),
``set_up_buckroot``, ``initialize_toolchains_buck`` and ``initialize_root_buck``.
The text is byte for byte what those functions write.
"""

from __future__ import annotations

from pathlib import Path

BUCKCONFIG = """\
[cells]
  root = .
  prelude = prelude
  toolchains = toolchains
  none = none

[cell_aliases]
  config = prelude
  ovr_config = prelude
  fbcode = none
  fbsource = none
  fbcode_macros = none
  buck = none

# Uses a copy of the prelude bundled with the buck2 binary. You can alternatively delete this
# section and vendor a copy of the prelude to the `prelude` directory of your project.
[external_cells]
  prelude = bundled

[parser]
  target_platform_detector_spec = target:root//...->prelude//platforms:default \\
    target:prelude//...->prelude//platforms:default \\
    target:toolchains//...->prelude//platforms:default

[build]
  execution_platforms = prelude//platforms:default
"""

GIT_TAIL = """
[project]
  ignore = .git
"""

TOOLCHAINS_BUCK = """\
load("@prelude//toolchains:demo.bzl", "system_demo_toolchains")

# All the default toolchains, suitable for a quick demo or early prototyping.
# Most real projects should copy/paste the implementation to configure them.
system_demo_toolchains()"""

ROOT_BUCK = """\
# A list of available rules and their signatures can be found here: https://buck2.build/docs/prelude/globals/

genrule(
    name = "hello_world",
    out = "out.txt",
    cmd = "echo BUILT BY BUCK2> $OUT",
)
"""


def buck2_init(repo: Path, *, git: bool = False) -> Path:
    """Lay out ``repo`` as ``buck2 init [--git]`` leaves it (without running git)."""
    repo.mkdir(parents=True, exist_ok=True)
    (repo / ".buckroot").write_text("")
    (repo / ".buckconfig").write_text(BUCKCONFIG + (GIT_TAIL if git else ""))
    (repo / "toolchains").mkdir(exist_ok=True)
    (repo / "toolchains" / "BUCK").write_text(TOOLCHAINS_BUCK)
    (repo / "BUCK").write_text(ROOT_BUCK)
    if git:
        (repo / ".gitignore").write_text("/buck-out\n")
    return repo
