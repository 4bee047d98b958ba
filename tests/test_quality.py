"""Quality gates, run as tests so the README's one test command runs them all.

Each gate runs the real tool from the interpreter's own environment (the venv
that runs pytest) against the working tree. A failing gate prints the tool's
own report, so the message says which file and line broke the rule.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LINT_PATHS = ("lre", "tests", "bench")


def _tool(name: str) -> str:
    """Path of a console script installed next to the running interpreter."""
    path = BIN / name
    if not path.exists():
        found = shutil.which(name)
        if found is None:
            pytest.fail(f"{name} is not installed next to {sys.executable} nor on PATH")
        return found
    return str(path)


def _run(args: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )


def _report(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def _pyproject() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def test_ruff_check() -> None:
    proc = _run([_tool("ruff"), "check", "--no-cache", *LINT_PATHS])
    assert proc.returncode == 0, _report(proc)


def test_ruff_format() -> None:
    proc = _run([_tool("ruff"), "format", "--check", "--no-cache", *LINT_PATHS])
    assert proc.returncode == 0, _report(proc)


def test_mypy_strict() -> None:
    # Packages and strictness come from [tool.mypy] in pyproject.toml.
    config = _pyproject()["tool"]
    assert isinstance(config, dict)
    assert config["mypy"]["strict"] is True
    proc = _run([_tool("mypy")])
    assert proc.returncode == 0, _report(proc)


def test_import_contracts_kept() -> None:
    proc = _run([_tool("lint-imports"), "--no-cache"])
    assert proc.returncode == 0, _report(proc)
    assert "0 broken" in proc.stdout, _report(proc)


def _layer_packages() -> set[str]:
    tool = _pyproject()["tool"]
    assert isinstance(tool, dict)
    names: set[str] = set()
    for contract in tool["importlinter"]["contracts"]:
        assert contract["type"] == "layers", contract["name"]
        assert contract["containers"] == ["lre"], contract["name"]
        for layer in contract["layers"]:
            for part in layer.replace("|", ":").split(":"):
                names.add(part.strip().strip("()"))
    return names


def test_every_layer_package_exists() -> None:
    """The contracts mark layers optional; this is what keeps them honest."""
    names = _layer_packages()
    assert {"proto", "errors", "digest", "config", "cli"} <= names
    missing = sorted(n for n in names if not (ROOT / "lre" / n / "__init__.py").is_file())
    assert not missing, f"layers named in [tool.importlinter] without a package: {missing}"


def _copy_for_lint(tmp_path: Path) -> Path:
    dest = tmp_path / "repo"
    dest.mkdir()
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    shutil.copytree(
        ROOT / "lre", dest / "lre", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    return dest


@pytest.mark.parametrize(
    ("package", "imported", "contract"),
    [
        ("errors", "lre.config", "Packages import only leftwards"),
        ("config", "lre.cas", "Packages import only leftwards"),
        ("service", "lre.worker", "service never imports worker"),
        ("app", "lre.tui", "nothing imports tui or cli"),
    ],
)
def test_lint_imports_rejects_a_rightward_import(
    tmp_path: Path, package: str, imported: str, contract: str
) -> None:
    """A deliberately bad import in a copy of lre/ must break a contract."""
    repo = _copy_for_lint(tmp_path)
    if not (repo / "lre" / package).is_dir() or not (repo / imported.replace(".", "/")).is_dir():
        pytest.fail(f"lre.{package} or {imported} does not exist yet")
    (repo / "lre" / package / "_deliberately_bad.py").write_text(f"import {imported}\n")
    proc = subprocess.run(
        [_tool("lint-imports"), "--no-cache"],
        cwd=repo,
        env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0, _report(proc)
    assert f"{contract} BROKEN" in proc.stdout, _report(proc)
    assert f"lre.{package}._deliberately_bad -> {imported}" in proc.stdout, _report(proc)


def test_lint_imports_allows_siblings_of_the_bottom_layer(tmp_path: Path) -> None:
    """proto, errors and digest share one layer and may import each other."""
    repo = _copy_for_lint(tmp_path)
    (repo / "lre" / "errors" / "_sibling.py").write_text("import lre.digest\nimport lre.proto\n")
    proc = subprocess.run(
        [_tool("lint-imports"), "--no-cache"],
        cwd=repo,
        env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, _report(proc)


def test_warnings_are_errors() -> None:
    with pytest.raises(UserWarning):
        warnings.warn("pytest must turn this into an error", UserWarning, stacklevel=1)


def test_pytest_runs_in_trio_mode() -> None:
    options = _pyproject()["tool"]
    assert isinstance(options, dict)
    ini = options["pytest"]["ini_options"]
    assert ini["trio_mode"] is True
    assert ini["filterwarnings"] == ["error"]


async def test_async_tests_need_no_marker() -> None:
    import trio

    await trio.lowlevel.checkpoint()
    assert trio.lowlevel.current_task() is not None


def _setup_commands() -> list[str]:
    """The commands in the README's "Set up" section, one per bash block."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    blocks = section.split("```bash\n")[1:]
    return [block.split("```", 1)[0].strip() for block in blocks]


def test_readme_has_exactly_two_setup_commands() -> None:
    commands = _setup_commands()
    assert len(commands) == 2, commands
    assert all("\n" not in c for c in commands), commands
    install, test = commands
    assert install.endswith("lre up")
    assert "pytest" in test and "[test]" in test


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    script = ROOT / ".ci" / "run"
    assert script.stat().st_mode & 0o111, ".ci/run must be executable"
    lines = [line for line in script.read_text().splitlines() if line.strip()]
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines
    assert lines[-1] == _setup_commands()[1]
