"""``${VAR}`` expansion in config strings.

The rule, applied once to every string value after the JSON5 text is parsed
(object keys are never expanded):

- ``${NAME}`` is the value of environment variable ``NAME``; an unset
  variable is an error (a set but empty one expands to "").
- ``${NAME:-default}`` is the variable's value when it is set and not empty,
  otherwise ``default``. The default is itself expanded, so
  ``${A:-${B:-x}}`` works; a default that is not used is not evaluated.
  A default cannot contain a literal ``}``.
- ``$$`` is a literal ``$``. A ``$`` followed by anything else is kept as is.
- NAME is letters, digits and ``_``, not starting with a digit.
- Expanded text is not expanded again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ExpansionError(ValueError):
    """A ``${...}`` expression is malformed or names an unset variable."""


def expand_env(text: str, env: Mapping[str, str]) -> str:
    """``text`` with every ``${...}`` replaced and ``$$`` unescaped.

    Raises ``ExpansionError`` naming the variable when one without a default
    is unset, or describing the malformed expression.
    """
    if "$" not in text:
        return text
    value, _ = _Expander(text, env).sequence(0, nested=False, evaluate=True)
    return value


def escape_env(text: str) -> str:
    """The inverse of ``expand_env`` for literal text: every ``$`` doubled."""
    return text.replace("$", "$$")


class _Expander:
    def __init__(self, text: str, env: Mapping[str, str]) -> None:
        self.text = text
        self.env = env

    def sequence(self, index: int, *, nested: bool, evaluate: bool) -> tuple[str, int]:
        """Expand from ``index`` to the end, or (nested) to the closing brace.

        Returns the text and the index of the closing brace (nested) or the end.
        """
        text = self.text
        out: list[str] = []
        while index < len(text):
            char = text[index]
            if char == "$" and text.startswith("$$", index):
                out.append("$")
                index += 2
            elif char == "$" and text.startswith("${", index):
                value, index = self.variable(index + 2, evaluate=evaluate)
                out.append(value)
            elif char == "}" and nested:
                return "".join(out), index
            else:
                out.append(char)
                index += 1
        if nested:
            raise ExpansionError(f"unterminated '${{' in {text!r}")
        return "".join(out), index

    def variable(self, index: int, *, evaluate: bool) -> tuple[str, int]:
        """Expand ``NAME}`` or ``NAME:-default}`` starting at ``index``."""
        text = self.text
        match = _NAME.match(text, index)
        if match is None:
            raise ExpansionError(
                f"expected a variable name after '${{' at offset {index} in {text!r}"
            )
        name = match.group()
        index = match.end()
        if text.startswith("}", index):
            if evaluate and name not in self.env:
                raise ExpansionError(
                    f"environment variable {name} is not set (write ${{{name}:-default}} "
                    "to give a default)"
                )
            return self.env.get(name, ""), index + 1
        if text.startswith(":-", index):
            current = self.env.get(name, "")
            use_default = evaluate and not current
            default, index = self.sequence(index + 2, nested=True, evaluate=use_default)
            return (default if use_default else current), index + 1
        if index >= len(text):
            raise ExpansionError(f"unterminated '${{' in {text!r}")
        raise ExpansionError(
            f"unexpected {text[index]!r} after '${{{name}' in {text!r} "
            "(write ${NAME} or ${NAME:-default})"
        )
