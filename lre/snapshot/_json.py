"""Turning snapshot rows into JSON-ready values and back.

The readers raise ``TypeError`` for a value of the wrong shape and
``KeyError`` (``"Row.field"``) for a missing field; ``ProcessSnapshot.from_json``
turns both into a ``ValueError`` naming the field.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import MISSING, fields, replace
from types import MappingProxyType
from typing import Any, TypeVar

from lre.snapshot._events import EventKind, RecentEvent
from lre.snapshot._rows import UpstreamRow

__all__ = [
    "event_from_json",
    "int_map",
    "optional_int",
    "plain",
    "row_from_json",
    "upstream_from_json",
]

_T = TypeVar("_T")


def plain(value: Any) -> Any:
    """``value`` as JSON-ready dicts, lists and scalars (dataclasses by field
    name, enums by value, mappings with string keys)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    return value


def int_map(value: Any) -> Mapping[str, int]:
    """A read-only ``{str: int}`` from a JSON object of counts."""
    if not isinstance(value, Mapping):
        raise TypeError(f"expected an object of counts, got {type(value).__name__}")
    return MappingProxyType({str(k): int(v) for k, v in value.items()})


def optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def row_from_json(cls: type[_T], value: Any) -> _T:
    """A ``cls`` dataclass from its JSON object; keys it does not know are
    ignored (a newer server may add fields), a field without a default must
    be there."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{cls.__name__}: expected an object, got {type(value).__name__}")
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    missing = [
        f.name
        for f in fields(cls)  # type: ignore[arg-type]
        if f.name not in value and f.default is MISSING and f.default_factory is MISSING
    ]
    if missing:
        raise KeyError(f"{cls.__name__}.{missing[0]}")
    return cls(**{k: v for k, v in value.items() if k in names})


def upstream_from_json(value: Any) -> UpstreamRow:
    row = row_from_json(UpstreamRow, value)
    return replace(row, counters=int_map(row.counters))


def event_from_json(value: Any) -> RecentEvent:
    if not isinstance(value, Mapping):
        raise TypeError(f"event: expected an object, got {type(value).__name__}")
    return RecentEvent(
        at=float(value["at"]),
        kind=EventKind(value["kind"]),
        message=str(value.get("message", "")),
        summary=str(value.get("summary", "")),
        worker=str(value.get("worker", "")),
        peak_rss_bytes=optional_int(value.get("peak_rss_bytes")),
        target=str(value.get("target", "")),
    )
