"""Best-effort line numbers for paths in a JSON5 text.

The json5 parser reports no positions, so after a successful parse this
module scans the same text once more, tracking the path of each key and
list element, and records the line where it starts. It understands strings,
comments, nesting and commas; when it is confused by something (it never
raises) some paths simply have no line.
"""

from __future__ import annotations

from dataclasses import dataclass

import json5

from lre.config._paths import Path

_PUNCTUATION = "{}[]:,"


@dataclass(slots=True)
class _Frame:
    path: Path
    is_object: bool
    key: str | None = None
    expecting_key: bool = True
    index: int = 0
    element_seen: bool = False


def line_index(text: str) -> dict[Path, int]:
    """Map each key and list element path in ``text`` to its 1-based line."""
    lines: dict[Path, int] = {}
    try:
        _scan(text, lines)
    except (ValueError, IndexError):
        pass
    return lines


def line_of(path: Path, lines: dict[Path, int]) -> int | None:
    """The line of ``path`` or, failing that, of its nearest recorded parent."""
    for end in range(len(path), -1, -1):
        line = lines.get(path[:end])
        if line is not None:
            return line
    return None


def _scan(text: str, lines: dict[Path, int]) -> None:
    stack: list[_Frame] = []
    line = 1
    index = 0
    length = len(text)

    def value_starts() -> Path | None:
        """Record the start of a value; return its path."""
        if not stack:
            lines.setdefault((), line)
            return ()
        top = stack[-1]
        if top.is_object:
            return (*top.path, top.key) if top.key is not None else None
        path = (*top.path, top.index)
        if not top.element_seen:
            top.element_seen = True
            lines.setdefault(path, line)
        return path

    while index < length:
        char = text[index]
        if char == "\n":
            line += 1
            index += 1
        elif char.isspace():
            index += 1
        elif text.startswith("//", index):
            end = text.find("\n", index)
            index = length if end < 0 else end
        elif text.startswith("/*", index):
            end = text.find("*/", index + 2)
            end = length if end < 0 else end + 2
            line += text.count("\n", index, end)
            index = end
        elif char in "{[":
            path = value_starts()
            stack.append(_Frame(path=path if path is not None else (), is_object=char == "{"))
            index += 1
        elif char in "}]":
            if stack:
                stack.pop()
            index += 1
        elif char == ":":
            if stack and stack[-1].is_object:
                stack[-1].expecting_key = False
            index += 1
        elif char == ",":
            if stack:
                top = stack[-1]
                if top.is_object:
                    top.expecting_key = True
                    top.key = None
                else:
                    top.index += 1
                    top.element_seen = False
            index += 1
        else:
            if char in "\"'":
                end = _string_end(text, index)
            else:
                end = index
                while end < length and not text[end].isspace() and text[end] not in _PUNCTUATION:
                    if text.startswith("//", end) or text.startswith("/*", end):
                        break
                    end += 1
            token = text[index:end]
            index = end
            if stack and stack[-1].is_object and stack[-1].expecting_key:
                key = json5.loads(token) if char in "\"'" else token
                top = stack[-1]
                top.key = str(key)
                lines.setdefault((*top.path, top.key), line)
            else:
                value_starts()
            line += token.count("\n")


def _string_end(text: str, start: int) -> int:
    """Index just past the string literal starting at ``start``."""
    quote = text[start]
    index = start + 1
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
        elif char == quote:
            return index + 1
        else:
            index += 1
    raise ValueError("unterminated string")
