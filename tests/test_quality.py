"""Quality gates, run as tests so the README's one test command runs them all.

Each gate runs the real tool from the interpreter's own environment (the venv
that runs pytest) against the working tree. A failing gate prints the tool's
own report, so the message says which file and line broke the rule.
"""

from __future__ import annotations

import ast
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
        if contract["type"] == "forbidden":
            continue  # checked by test_forbidden_contracts_name_what_exists
        assert contract["type"] == "layers", contract["name"]
        for container in contract["containers"]:
            assert container == "lre" or container.startswith("lre."), contract["name"]
            inside = container.split(".")[1:]  # lre.worker -> worker/<layer>
            for layer in contract["layers"]:
                for part in layer.replace("|", ":").split(":"):
                    names.add("/".join([*inside, part.strip().strip("()")]))
    return names


def test_every_layer_package_exists() -> None:
    """The contracts mark layers optional; this is what keeps them honest."""
    names = _layer_packages()
    assert {"proto", "errors", "digest", "config", "cli"} <= names
    missing = sorted(n for n in names if not (ROOT / "lre" / n / "__init__.py").is_file())
    assert not missing, f"layers named in [tool.importlinter] without a package: {missing}"


def test_forbidden_contracts_name_what_exists() -> None:
    """A forbidden contract naming a module that is gone would keep nothing."""
    tool = _pyproject()["tool"]
    assert isinstance(tool, dict)
    named: list[str] = []
    for contract in tool["importlinter"]["contracts"]:
        if contract["type"] == "forbidden":
            named += contract["source_modules"] + contract["forbidden_modules"]
    assert named
    missing = [
        module
        for module in named
        if not (ROOT / module.replace(".", "/") / "__init__.py").is_file()
        and not (ROOT / (module.replace(".", "/") + ".py")).is_file()
    ]
    assert not missing, f"forbidden contracts name modules that do not exist: {missing}"


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
        ("snapshot", "lre.digest", "Packages import only leftwards"),
        ("service", "lre.worker", "service never imports worker"),
        ("app", "lre.tui", "nothing imports tui or cli"),
        ("worker.view", "lre.worker.memory", "lre.worker's subpackages import only downwards"),
        ("worker.inputs", "lre.worker.memory", "lre.worker's subpackages import only downwards"),
    ],
)
def test_lint_imports_rejects_a_rightward_import(
    tmp_path: Path, package: str, imported: str, contract: str
) -> None:
    """A deliberately bad import in a copy of lre/ must break a contract."""
    repo = _copy_for_lint(tmp_path)
    folder = repo / "lre" / package.replace(".", "/")
    if not folder.is_dir() or not (repo / imported.replace(".", "/")).is_dir():
        pytest.fail(f"lre.{package} or {imported} does not exist yet")
    (folder / "_deliberately_bad.py").write_text(f"import {imported}\n")
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


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names, relative ones resolved
    against ``module`` (the importing module's dotted name)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")[: -node.level]
    return ".".join([*base, node.module] if node.module else base)


def private_imports_across_packages(source: str, module: str) -> list[str]:
    """Imports in ``source`` (the text of lre module ``module``, e.g.
    ``lre.tui._render``) that reach a private part of another lre package:
    ``import lre.app._snapshot``, ``from lre.app._snapshot import X`` or
    ``from lre.app import _snapshot``. A package's own private modules are
    allowed. Each entry reads ``line N: lre.app._snapshot``."""
    own = module.split(".")[1] if module.count(".") >= 1 else ""
    found: list[str] = []

    def check(line: int, target: str) -> None:
        parts = target.split(".")
        if len(parts) < 3 or parts[0] != "lre" or parts[1] == own:
            return
        if any(_is_private(part) for part in parts[2:]):
            found.append(f"line {line}: {target}")

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check(node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(module, node)
            check(node.lineno, target)
            for alias in node.names:
                if _is_private(alias.name):
                    check(node.lineno, f"{target}.{alias.name}")
    return found


def _lre_modules() -> list[tuple[Path, str]]:
    """Every lre source file with its dotted module name."""
    out = []
    for path in sorted((ROOT / "lre").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((path, ".".join(parts)))
    return out


def test_packages_import_each_other_only_through_init() -> None:
    """Across lre's packages only ``__init__`` names are imported; modules
    starting with ``_`` are reached only from inside their own package.

    The rule binds lre/ only: tests may import private modules, since they
    check internals (mostly of the package they mirror, at times of a seam).
    """
    broken = [
        f"{path.relative_to(ROOT)}: {hit}"
        for path, module in _lre_modules()
        for hit in private_imports_across_packages(path.read_text(), module)
    ]
    assert len(_lre_modules()) > 100  # the walk really found the tree
    assert not broken, "private module of another package imported:\n" + "\n".join(broken)


def worker_face_bypasses(source: str, module: str) -> list[str]:
    """Imports in ``source`` (lre module ``module``, inside ``lre.worker``)
    that reach a private module of a worker subpackage other than the
    module's own: ``lre.worker.view._view`` from ``lre.worker._action`` or
    from ``lre.worker.containment._pid_namespace``. Each entry reads
    ``line N: lre.worker.view._view``."""
    parts = module.split(".")
    own = parts[2] if len(parts) >= 3 and not _is_private(parts[2]) else ""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        hits: dict[str, None] = {}
        for target in targets:
            hops = target.split(".")
            if (
                len(hops) >= 4
                and hops[:2] == ["lre", "worker"]
                and hops[2] not in ("", own)
                and not _is_private(hops[2])
                and _is_private(hops[3])
            ):
                hits[".".join(hops[:4])] = None
        found += [f"line {node.lineno}: {hit}" for hit in hits]
    return found


def test_worker_subpackages_meet_through_their_faces() -> None:
    """lre/worker's subpackages (and the modules above them) use one
    another only through each subpackage's ``__init__``."""
    broken = [
        f"{path.relative_to(ROOT)}: {hit}"
        for path, module in _lre_modules()
        if module == "lre.worker" or module.startswith("lre.worker.")
        for hit in worker_face_bypasses(path.read_text(), module)
    ]
    assert len([m for _, m in _lre_modules() if m.startswith("lre.worker.")]) > 50
    assert not broken, "worker subpackage reached past its face:\n" + "\n".join(broken)


def test_worker_face_check_reports_a_bypass() -> None:
    source = """\
from lre.worker.view._view import ActionView
from lre.worker.view import ActionView
from lre.worker.containment._syscalls import LIBC
from lre.worker.view import _view
"""
    assert worker_face_bypasses(source, "lre.worker.containment._pid_namespace") == [
        "line 1: lre.worker.view._view",
        "line 4: lre.worker.view._view",
    ]
    assert worker_face_bypasses(source, "lre.worker._action") == [
        "line 1: lre.worker.view._view",
        "line 3: lre.worker.containment._syscalls",
        "line 4: lre.worker.view._view",
    ]
    assert worker_face_bypasses(source, "lre.worker.view") == [
        "line 3: lre.worker.containment._syscalls"
    ]


#: A function of lre.worker may take at most this many parameters (positional
#: and keyword-only, ``self`` and ``cls`` not counted); more are grouped into one
#: frozen object (``SpawnRequest``, ``RunnerContext``, ``WorkerHost``).
MAX_PARAMETERS = 8

#: The functions still above it, each with why it is left so.
TOO_MANY_PARAMETERS_KEPT = {
    # Built by for_worker from a worker's config; the tests build it by keyword.
    "lre/worker/_view_policy.py: ViewPolicy.__init__",
}


def too_many_parameters(source: str, path: str) -> list[str]:
    """``path: Class.function`` of each function in ``source`` that takes
    more than ``MAX_PARAMETERS`` parameters."""
    found: list[str] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                args = child.args
                names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
                if len([n for n in names if n not in ("self", "cls")]) > MAX_PARAMETERS:
                    found.append(f"{path}: {prefix}{child.name}")
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(source), "")
    return found


def test_worker_functions_take_few_parameters() -> None:
    found = {
        offender
        for path in sorted((ROOT / "lre" / "worker").rglob("*.py"))
        for offender in too_many_parameters(path.read_text(), str(path.relative_to(ROOT)))
    }
    new = sorted(found - TOO_MANY_PARAMETERS_KEPT)
    assert not new, f"more than {MAX_PARAMETERS} parameters (group them in one object): {new}"
    fixed = sorted(TOO_MANY_PARAMETERS_KEPT - found)
    assert not fixed, f"no longer above {MAX_PARAMETERS} parameters, drop from the list: {fixed}"


def test_parameter_check_counts_keywords_and_skips_self() -> None:
    source = """\
def nine(a, b, c, d, e, f, g, h, *, i): pass
def eight(a, b, c, d, e, f, g, *rest, h, **more): pass
class C:
    def __init__(self, a, b, c, d, e, f, g, h): pass
    async def run(self, a, b, c, d, e, f, g, h, i): pass
"""
    assert too_many_parameters(source, "m.py") == ["m.py: nine", "m.py: C.run"]


def test_private_import_check_reports_each_form() -> None:
    source = """\
import lre.app._snapshot
import lre.service._rpc_metrics as metrics
from lre.app._snapshot import ProcessSnapshot
from lre.app import _snapshot, Application
from ..service._rpc_metrics import RpcMetrics
from lre.tui._format import bar
from ._format import short_bytes
from lre.app import Application
from lre import __version__
import lre.service.execution


def later() -> None:
    from lre.cas._protocol import BlobStore
"""
    assert private_imports_across_packages(source, "lre.tui._render") == [
        "line 1: lre.app._snapshot",
        "line 2: lre.service._rpc_metrics",
        "line 3: lre.app._snapshot",
        "line 4: lre.app._snapshot",
        "line 5: lre.service._rpc_metrics",
        "line 14: lre.cas._protocol",
    ]
    # the same imports are fine inside the package they belong to
    assert private_imports_across_packages("from lre.app._snapshot import X\n", "lre.app") == []
    # lre's own top-level modules belong to no package
    assert private_imports_across_packages("import lre.cli._app\n", "lre.__main__") == [
        "line 1: lre.cli._app"
    ]


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


def _foreign_conftest_imports(tests: Path) -> list[str]:
    """``file:line -> module`` for every import of a ``conftest`` that is not
    in the importing file's own folder (shared plumbing lives in tests/_support)."""
    found: list[str] = []
    for path in sorted(tests.rglob("*.py")):
        own = ".".join(("tests", *path.parent.relative_to(tests).parts, "conftest"))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level:
                modules = [node.module or ""]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            for module in modules:
                if module.endswith(".conftest") and module != own:
                    found.append(f"{path.relative_to(tests.parent)}:{node.lineno} -> {module}")
    return found


def test_no_test_imports_another_folders_conftest() -> None:
    assert _foreign_conftest_imports(ROOT / "tests") == []


def test_foreign_conftest_check_finds_one(tmp_path: Path) -> None:
    """The check above reports a deliberate import of another folder's conftest."""
    (tmp_path / "tests" / "a").mkdir(parents=True)
    (tmp_path / "tests" / "b").mkdir()
    (tmp_path / "tests" / "a" / "conftest.py").write_text("from tests.a.conftest import x\n")
    (tmp_path / "tests" / "b" / "test_x.py").write_text("import tests.a.conftest\n")
    assert _foreign_conftest_imports(tmp_path / "tests") == [
        "tests/b/test_x.py:1 -> tests.a.conftest"
    ]
