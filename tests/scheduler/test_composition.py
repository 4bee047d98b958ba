"""The scheduler is composed of objects that talk through public methods:
no Protocol in lre names a private member, and ``Scheduler`` inherits from
nothing (its parts are attributes, not base classes)."""

from __future__ import annotations

import ast
from pathlib import Path

from lre.scheduler import Scheduler

LRE = Path(__file__).resolve().parents[2] / "lre"


def _is_protocol(node: ast.ClassDef) -> bool:
    for base in node.bases:
        target = base.value if isinstance(base, ast.Subscript) else base
        if isinstance(target, ast.Name) and target.id == "Protocol":
            return True
        if isinstance(target, ast.Attribute) and target.attr == "Protocol":
            return True
    return False


def private_protocol_members(source: str) -> list[str]:
    """``Protocol.member`` for every private member a Protocol of ``source`` names."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef) or not _is_protocol(node):
            continue
        for item in node.body:
            name = None
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                name = item.name
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                name = item.target.id
            if name is not None and name.startswith("_") and not name.startswith("__"):
                found.append(f"{node.name}.{name}")
    return found


def test_no_protocol_in_lre_names_a_private_member() -> None:
    offenders = {
        str(path.relative_to(LRE)): members
        for path in sorted(LRE.rglob("*.py"))
        if "proto" not in path.relative_to(LRE).parts[:1]
        and (members := private_protocol_members(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}


def test_the_rule_sees_a_private_member_of_a_protocol() -> None:
    source = (
        "from typing import Protocol\n"
        "class Owner(Protocol):\n"
        "    _counts: int\n"
        "    def _complete(self) -> None: ...\n"
        "    def finish(self) -> None: ...\n"
        "    def __call__(self) -> None: ...\n"
    )
    assert private_protocol_members(source) == ["Owner._counts", "Owner._complete"]


def test_the_scheduler_is_composed_not_inherited() -> None:
    assert Scheduler.__bases__ == (object,)
