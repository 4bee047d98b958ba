"""``lre doctor``'s checks of the repository: the client config and the build tool.

- ``bazel config`` / ``buck2 config``: the file ``lre up`` writes is there,
  Bazel imports it, and it points at the address the running lre listens on;
- ``bazel``: Bazel is on PATH, its version, and every flag in lre.bazelrc is
  one this Bazel knows (asked from Bazel itself: ``bazel --batch help
  build --short`` outside the repository, about two seconds, no server
  left running);
- ``team cache``: the repository's own remote settings (a team cache or
  cluster in its bazelrc files, ``lre.cli._team_cache``): OK when lre's lines
  override them, FAIL naming file:line when one still wins over lre's, or
  when lre.bazelrc predates the ``--remote_cache=`` line that overrides them;
- ``buck2 config`` / ``buck2 platform``: in ``lre.cli._doctor_buck2``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from lre.cli._bazel_client import parse_bazel_version
from lre.cli._bazelrc_import import TRY_IMPORT, importer
from lre.cli._checks import Check
from lre.cli._client_target import points_at
from lre.cli._daemon import RunningServer
from lre.cli._doctor_buck2 import buck2_checks
from lre.cli._repository import is_bazel_repo, is_buck2_repo
from lre.cli._team_cache import ENDPOINT_FLAGS, losing_reason, remote_settings, team_caches

_FLAG = re.compile(r"--([A-Za-z0-9_]+)")
_HELP_FLAG = re.compile(r"^\s+--(\[no\])?([A-Za-z0-9_]+)\s*$")


def _active_lines(text: str) -> list[str]:
    return [
        ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]


def bazelrc_flags(text: str) -> list[tuple[str, str]]:
    """``(flag name, whole argument)`` of every option in a bazelrc's active lines."""
    flags = []
    for line in _active_lines(text):
        for word in line.split()[1:]:
            match = _FLAG.match(word)
            if match:
                flags.append((match[1], word))
    return flags


def bazel_config_check(repo: Path, server: RunningServer | None) -> Check:
    """lre.bazelrc present, imported by .bazelrc, pointing at ``server``."""
    name = "bazel config"
    rc = repo / "lre.bazelrc"
    bazelrc = repo / ".bazelrc"
    through = importer(repo, Path.home())
    if not rc.exists():
        # Never linked or `lre unlink`ed (a home ~/.bazelrc importing every
        # repository's lre.bazelrc links none by itself): a WARN, not a failure.
        if through is None or not through.is_relative_to(repo):
            return Check(
                name,
                "WARN",
                f"{repo} is not linked to lre: Bazel builds locally",
                f"run `lre up` in {repo} to build through lre",
            )
        return Check(
            name,
            "FAIL",
            f"{through} imports {rc}, which is missing: Bazel builds locally",
            f"run `lre up` in {repo}",
        )
    executors = [
        w.split("=", 1)[-1] for f, w in bazelrc_flags(rc.read_text()) if f == "remote_executor"
    ]
    if through is None:
        return Check(
            name,
            "FAIL",
            f"{bazelrc} does not import lre.bazelrc: Bazel builds locally",
            f"add the line `{TRY_IMPORT}` to {bazelrc} (or run `lre up` there without --no-edit)",
        )
    if not executors:
        if server is None:  # what `lre down` leaves: the file is there, setting nothing
            return Check(
                name, "OK", f"{rc} sets nothing while lre is stopped: Bazel builds locally"
            )
        return Check(
            name,
            "FAIL",
            f"lre runs but {rc} sets no --remote_executor: Bazel builds locally",
            f"run `lre up` in {repo}",
        )
    applied = any(_applies_lre(line) for line in _active_lines(rc.read_text()))
    for rc_file in {bazelrc, through}:
        if rc_file.is_file():
            applied = applied or any(_applies_lre(ln) for ln in _active_lines(rc_file.read_text()))
    if not applied:
        # Only ``build:lre`` lines: lre is opt-in (or was made inert by ``lre down``).
        if server is None:
            return Check(
                name,
                "OK",
                f"{rc} applies only with --config=lre, and lre is not running: Bazel builds "
                "locally",
            )
        check = points_at(name, rc, executors[-1], server, repo)
        if check.status == "OK":
            return Check(name, "OK", check.message + "; used with `bazel build --config=lre`")
        return check
    return points_at(name, rc, executors[-1], server, repo)


def _applies_lre(line: str) -> bool:
    """Whether a bazelrc line turns lre on for every build: ``build
    --config=lre`` or a ``--remote_executor`` outside ``build:lre``."""
    words = line.split()
    if not words or words[0] != "build":
        return False
    return "--config=lre" in words[1:] or any(w.startswith("--remote_executor") for w in words[1:])


def bazel_version() -> tuple[str, tuple[int, int, int] | None]:
    """(how the version was found, the version) from Debian's package
    database when Bazel is ``bazel-bootstrap``, else ``bazel --version``."""
    if shutil.which("dpkg-query"):
        try:
            out = subprocess.run(
                ["dpkg-query", "-W", "-f=${Version}", "bazel-bootstrap"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            if out.returncode == 0 and out.stdout.strip():
                return f"Debian package bazel-bootstrap {out.stdout.strip()}", parse_bazel_version(
                    out.stdout
                )
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        out = subprocess.run(
            ["bazel", "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"`bazel --version` failed: {error}", None
    text = (out.stdout + out.stderr).strip()
    if not re.search(r"\d+\.\d+", text):
        return f"`bazel --version` says {text!r}", None
    return f"`bazel --version` says {text!r}", parse_bazel_version(text)


def bazel_known_flags(bazel: str) -> set[str]:
    """Names of the options ``bazel build`` accepts (both ``x`` and ``nox`` for
    booleans). Raises ``RuntimeError`` with Bazel's words when it cannot tell."""
    with tempfile.TemporaryDirectory(prefix="lre-doctor-") as cwd:
        try:
            out = subprocess.run(
                [bazel, "--batch", "help", "build", "--short"],
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise RuntimeError(str(error)) from None
    names: set[str] = set()
    for line in out.stdout.splitlines():
        match = _HELP_FLAG.match(line)
        if match:
            names.add(match[2])
            if match[1]:
                names.add("no" + match[2])
    if out.returncode != 0 or not names:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"`bazel help build` exited {out.returncode}: {tail}")
    return names


def bazel_check(repo: Path) -> Check:
    """Bazel on PATH, its version, and the flags of lre.bazelrc it does not know."""
    name = "bazel"
    bazel = shutil.which("bazel")
    if bazel is None:
        return Check(
            name,
            "FAIL",
            "no `bazel` on PATH",
            "install Bazel (Debian: `apt-get install bazel-bootstrap`) or put it on PATH",
        )
    source, version = bazel_version()
    shown = ".".join(map(str, version)) if version else "of unknown version"
    about = f"Bazel {shown} at {bazel} ({source})"
    rc = repo / "lre.bazelrc"
    if not rc.exists():
        return Check(name, "OK", about + "; no lre.bazelrc to check its flags against")
    try:
        known = bazel_known_flags(bazel)
    except RuntimeError as error:
        return Check(
            name,
            "WARN",
            f"{about}; cannot list its flags: {error}",
            "check that `bazel help build` runs",
        )
    unknown = [word for flag, word in bazelrc_flags(rc.read_text()) if flag not in known]
    if unknown:
        return Check(
            name,
            "FAIL",
            f"{about}; lre.bazelrc uses flags this Bazel does not know: {', '.join(unknown)}",
            f"run `lre up` in {repo} so lre.bazelrc is written for this Bazel",
        )
    return Check(name, "OK", f"{about}; it knows every flag in lre.bazelrc")


def team_cache_check(repo: Path, home: Path) -> Check | None:
    """The repository's own remote endpoints against lre's (None: it sets none)."""
    name = "team cache"
    found = [s for s in remote_settings(repo, home) if s.flag in ENDPOINT_FLAGS]
    if not found:
        return None
    shown = "; ".join(f"{s.where} `{s.shown}`" for s in found)
    rc = repo / "lre.bazelrc"
    live = rc.is_file() and any(f == "remote_executor" for f, _ in bazelrc_flags(rc.read_text()))
    if not live:
        return Check(name, "OK", f"{shown}: Bazel uses it while lre is not linked or stopped")
    losing = [s for s in found if not s.outranked]
    if losing:
        first = losing[0]
        return Check(
            name,
            "FAIL",
            f"{first.where} `{first.shown}` {losing_reason(first)}",
            'see docs/upstream.md ("A repository with its own team cache")',
        )
    flags = [w for f, w in bazelrc_flags(rc.read_text()) if f == "remote_cache"]
    if any(s.flag == "remote_cache" and s.value for s in found) and not flags:
        return Check(
            name,
            "FAIL",
            f"{shown}, and {rc} predates the line that overrides it: Bazel uploads to the "
            "team cache and every action fails for missing inputs",
            f"run `lre link` in {repo}",
        )
    upstream = ""
    if team_caches(found):
        upstream = "; lre reads through a team cache only as its upstream (docs/upstream.md)"
    return Check(name, "OK", f"{shown}: lre.bazelrc overrides it, so builds go to lre{upstream}")


def repository_checks(repo: Path | None, server: RunningServer | None) -> list[Check]:
    """The client-config and build-tool checks for ``repo`` (SKIPs when None)."""
    if repo is None:
        skip = Check(
            "client config",
            "SKIP",
            "not inside a repository (no MODULE.bazel, WORKSPACE, .buckconfig or .git "
            "here or above)",
            "run `lre doctor` inside your repository, or pass --repo DIR",
        )
        return [skip]
    checks: list[Check] = []
    buck = is_buck2_repo(repo)
    if is_bazel_repo(repo) or not buck:
        checks += [bazel_config_check(repo, server), bazel_check(repo)]
        team = team_cache_check(repo, Path.home())
        if team is not None:
            checks.append(team)
    if buck:
        checks += buck2_checks(repo, server)
    return checks
