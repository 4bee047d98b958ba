"""Paths into a config document, such as ``stores[1].filesystem.max_bytes``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

#: A location in the document: object keys (str) and list indexes (int).
Path = tuple[str | int, ...]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def format_path(path: Path) -> str:
    """Render ``("stores", 1, "filesystem")`` as ``stores[1].filesystem``.

    Keys that are not identifiers are quoted: ``headers["x-api-key"]``.
    The empty path (the document itself) renders as ``<top level>``.
    """
    out: list[str] = []
    for part in path:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENTIFIER.fullmatch(part):
            out.append(f".{part}" if out else part)
        else:
            out.append(f"[{json.dumps(part)}]")
    return "".join(out) or "<top level>"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a config: where, and what."""

    path: Path
    message: str

    def render(self) -> str:
        return f"{format_path(self.path)}: {self.message}"
