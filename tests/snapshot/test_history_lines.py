"""A history line that cannot be read says which kind of line and which field."""

from __future__ import annotations

from typing import Any

import pytest

from lre.snapshot._history import record_from_json


@pytest.mark.parametrize(
    ("line", "kind", "field"),
    [
        ({"k": "a", "src": "executed"}, "history record", "at"),
        ({"k": "s", "at": 1.0, "used": 1}, "host sample", "cpu"),
        ({"k": "b", "at": 1.0, "inv": "i", "first": 1.0}, "build span", "last"),
        ({"k": "up"}, "start line", "at"),
    ],
)
def test_a_missing_field_is_named_with_its_line_kind(
    line: dict[str, Any], kind: str, field: str
) -> None:
    with pytest.raises(ValueError, match=f"^{kind} field '{field}' is missing$"):
        record_from_json(line)


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ({"k": "a", "at": 1.0, "src": "no such source"}, "history record"),
        ({"k": "s", "at": "noon", "cpu": 1, "used": 1}, "host sample"),
        ({"k": "b", "at": 1.0, "inv": "i", "first": [], "last": 1.0}, "build span"),
        ({"k": "up", "at": 1.0, "pid": "one"}, "start line"),
    ],
)
def test_a_malformed_field_is_named_with_its_line_kind(line: dict[str, Any], kind: str) -> None:
    with pytest.raises(ValueError, match=f"^{kind} has a malformed field: ") as caught:
        record_from_json(line)
    assert caught.value.__suppress_context__
