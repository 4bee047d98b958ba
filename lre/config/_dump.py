"""Write a ``Config`` back out as JSON5 text that loads to the same config."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from typing import Any

from lre.config._decode import json_key_of, model_fields
from lre.config._env import escape_env
from lre.config._model_fields import ByteSize, Seconds
from lre.config._models import Config
from lre.config._units import format_byte_size, format_seconds

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INDENT = "  "


def dump_config(config: Config) -> str:
    """``config`` as JSON5: every field (defaults included, unset optional
    blocks left out), sizes in binary units when exact, durations with units
    when a whole number of milliseconds, ``$`` escaped as
    ``$$`` so that loading the text gives back an equal ``Config``."""
    return _value(config, Config, 0) + "\n"


def _value(value: Any, tp: Any, depth: int) -> str:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        entries: list[tuple[str, str]] = []
        for name, field in model_fields(cls).items():
            item = getattr(value, name)
            if item is not None:
                entries.append((json_key_of(cls, name), _value(item, field.type, depth + 1)))
        return _object(entries, depth)
    if isinstance(value, dict):
        item_tp = _arg(tp, dict, 1)
        return _object([(k, _value(v, item_tp, depth + 1)) for k, v in value.items()], depth)
    if isinstance(value, tuple):
        item_tp = _arg(tp, tuple, 0)
        if not value:
            return "[]"
        inner = _INDENT * (depth + 1)
        items = [f"{inner}{_value(item, item_tp, depth + 1)}," for item in value]
        return "[\n" + "\n".join(items) + f"\n{_INDENT * depth}]"
    if isinstance(value, str):
        return json.dumps(escape_env(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and _is_byte_size(tp):
        return json.dumps(format_byte_size(value))
    if isinstance(value, int | float) and _is_seconds(tp):
        return json.dumps(format_seconds(value))
    return json.dumps(value)


def _object(entries: list[tuple[str, str]], depth: int) -> str:
    if not entries:
        return "{}"
    inner = _INDENT * (depth + 1)
    lines = [f"{inner}{_key(key)}: {text}," for key, text in entries]
    return "{\n" + "\n".join(lines) + f"\n{_INDENT * depth}}}"


def _key(key: str) -> str:
    return key if _IDENTIFIER.fullmatch(key) else json.dumps(key)


def _arg(tp: Any, origin: type, index: int) -> Any:
    for option in (tp, *typing.get_args(tp)):
        if typing.get_origin(option) is origin:
            return typing.get_args(option)[index]
    return Any


def _is_byte_size(tp: Any) -> bool:
    return tp is ByteSize or ByteSize in typing.get_args(tp)


def _is_seconds(tp: Any) -> bool:
    return tp is Seconds or Seconds in typing.get_args(tp)
