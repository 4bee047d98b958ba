"""The public surface (``__all__``) of each lre package, pinned by a rule.

An exported name must earn its place in one of three ways:

1. **used**: another lre package imports it (``from lre.cas import X`` in
   lre/scheduler/...); tests and benches do not count, they may import
   private modules;
2. **reachable**: it appears in the type hints (fields, parameters,
   returns) of a name that is used or reachable, so a caller can name the
   types of what it is handed (``Stage`` in ``OperationSnapshot.stage``);
3. **documented**: it is in ``DOCUMENTED`` with the reason it is API
   although no package imports it (an entry point, a generated module).

``NOT_YET_PRIVATE`` is for exports that pass none of these yet; it is
empty, and may only stay so or shrink: an entry that is used, reachable or no
longer exported fails, and so does a new export that earns its place in no
way. A name only tests use stays in its private module (tests import it from
there).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
LRE = ROOT / "lre"

PACKAGES = sorted(
    path.parent.name for path in LRE.glob("*/__init__.py") if not path.parent.name.startswith("_")
)

#: Exports no package imports that are API all the same, with why.
DOCUMENTED: dict[str, str] = {
    "cli.app": "the Typer application: `lre` is `main()` around it; tests drive it with "
    "typer's CliRunner",
    "proto.code_pb2": "a generated module (google.rpc.Code); proto exports its generated "
    "modules as its names (docs/architecture.md)",
    "errors.AlreadyExists": "a status class: error_for_code answers an upstream's "
    "ALREADY_EXISTS with it, and a caller catches it by this name",
    "errors.Unauthenticated": "a status class: error_for_code answers an upstream's "
    "UNAUTHENTICATED with it, and a caller catches it by this name",
}

#: Exports that earn their place in none of the three ways yet. Empty: the
#: names that were here (imported only by tests) left their ``__init__``,
#: and tests import them from the private module.
NOT_YET_PRIVATE: frozenset[str] = frozenset()


def _owner(path: Path) -> str | None:
    """The package a file of lre/ belongs to (None for lre/__main__.py)."""
    parts = path.relative_to(LRE).parts
    return parts[0] if len(parts) > 1 else None


def imports_across_packages(source: str, owner: str | None) -> Iterator[tuple[str, str]]:
    """(package, name) for each ``from lre.<package> import name`` in
    ``source`` where the package is not ``owner``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if len(parts) == 2 and parts[0] == "lre" and parts[1] != owner:
                for alias in node.names:
                    yield parts[1], alias.name


def _used() -> dict[str, set[str]]:
    """``package.name`` -> the packages (or files) importing it."""
    used: dict[str, set[str]] = {}
    for path in LRE.rglob("*.py"):
        if "proto" in path.relative_to(LRE).parts[:1]:
            continue
        owner = _owner(path)
        for package, name in imports_across_packages(path.read_text(), owner):
            used.setdefault(f"{package}.{name}", set()).add(owner or path.name)
    return used


def _exports() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for package in PACKAGES:
        module = importlib.import_module(f"lre.{package}")
        for name in getattr(module, "__all__", ()):
            out[f"{package}.{name}"] = getattr(module, name, None)
    return out


def _hints(obj: Any) -> list[Any]:
    """The type hints of ``obj``: a class's fields and its methods' and
    properties' signatures (also those it inherits from lre's classes, such
    as ``Scheduler``'s constructor), or a function's signature."""
    found: list[Any] = []
    targets: list[Any] = []
    if inspect.isclass(obj):
        targets.append(obj)
        own = [cls for cls in inspect.getmro(obj) if cls.__module__.startswith("lre.")]
        for member in (m for cls in own for m in vars(cls).values()):
            function = member.fget if isinstance(member, property) else member
            function = getattr(function, "__func__", function)
            if inspect.isfunction(function):
                targets.append(function)
    elif inspect.isfunction(obj):
        targets.append(obj)
    for target in targets:
        try:
            found += typing.get_type_hints(target).values()
        except Exception:  # a hint naming what only TYPE_CHECKING imports
            continue
    return found


def _named_in(hint: Any, into: set[int]) -> None:
    into.add(id(hint))
    origin = typing.get_origin(hint)
    if origin is not None:
        into.add(id(origin))
    for argument in typing.get_args(hint):
        _named_in(argument, into)


def earned() -> dict[str, str]:
    """``package.name`` -> how it earned its export (used / reachable / documented)."""
    exports = _exports()
    used = _used()
    how = {name: "used" for name in exports if name in used}
    grew = True
    while grew:
        named: set[int] = set()
        for name in how:
            for hint in _hints(exports[name]):
                _named_in(hint, named)
        new = [n for n, obj in exports.items() if n not in how and id(obj) in named]
        how.update(dict.fromkeys(new, "reachable"))
        grew = bool(new)
    for name in DOCUMENTED:
        how.setdefault(name, "documented")
    return how


def test_every_export_earns_its_place() -> None:
    exports = _exports()
    how = earned()
    unearned = sorted(n for n in exports if n not in how and n not in NOT_YET_PRIVATE)
    assert not unearned, (
        "exported, but no other package imports them, no used name's type hints name "
        f"them, and DOCUMENTED gives no reason: {unearned} (drop them from __all__ and "
        "__init__; tests import the private module)"
    )


def test_documented_entries_are_needed() -> None:
    exports = _exports()
    used = _used()
    for name, reason in DOCUMENTED.items():
        assert name in exports, f"DOCUMENTED names {name}, which is not exported"
        assert name not in used, f"{name} is imported by {sorted(used[name])}: drop its entry"
        assert reason.strip(), f"DOCUMENTED[{name!r}] gives no reason"


def test_not_yet_private_only_shrinks() -> None:
    exports = _exports()
    how = earned()
    gone = sorted(n for n in NOT_YET_PRIVATE if n not in exports)
    assert not gone, f"no longer exported: drop from NOT_YET_PRIVATE: {gone}"
    earns = sorted(f"{n} ({how[n]})" for n in NOT_YET_PRIVATE if n in how)
    assert not earns, f"these now earn their export: drop from NOT_YET_PRIVATE: {earns}"


def test_other_packages_import_only_exported_names() -> None:
    """A name another package imports is in its package's ``__all__`` (the
    surface is what ``__all__`` says, not whatever ``__init__`` happens to bind)."""
    exports = _exports()
    hidden = sorted(
        f"{name} by {sorted(users)}" for name, users in _used().items() if name not in exports
    )
    assert not hidden, f"imported across packages but not in __all__: {hidden}"


def test_the_rule_sees_a_cross_package_import() -> None:
    source = "from lre.cas import BlobStore\nfrom lre.scheduler._x import y\nfrom . import z\n"
    assert list(imports_across_packages(source, "worker")) == [("cas", "BlobStore")]
    assert list(imports_across_packages(source, "cas")) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_exports_are_listed_once_exist_and_are_not_private(package: str) -> None:
    module = importlib.import_module(f"lre.{package}")
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"lre.{package} has no __all__"
    assert len(exported) == len(set(exported)), f"lre.{package}.__all__ lists a name twice"
    missing = [name for name in exported if not hasattr(module, name)]
    assert not missing, f"lre.{package}.__all__ names what it does not define: {missing}"
    assert not [name for name in exported if name.startswith("_")]


def test_one_public_name_means_one_thing() -> None:
    """Two packages may export the same object (a re-export), never two
    different things under one name (as the scheduler's and the worker's
    statistics once were): a reader could not tell which one a name means."""
    owners: dict[str, dict[int, str]] = {}
    for package in PACKAGES:
        module = importlib.import_module(f"lre.{package}")
        for name in module.__all__:
            owners.setdefault(name, {}).setdefault(id(getattr(module, name)), package)
    clashes = {name: sorted(found.values()) for name, found in owners.items() if len(found) > 1}
    assert not clashes, f"one name, different things: {clashes}"
