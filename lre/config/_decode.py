"""Turn parsed JSON5 data into the frozen models, collecting every problem.

Generic over the dataclasses in ``_models`` by their type hints: ``str``,
``int``, ``float``, ``bool``, ``Literal[...]``, ``X | Y`` (including
``X | None``), ``tuple[X, ...]``, ``dict[str, X]``, nested dataclasses,
``ByteSize`` and ``Seconds``. A class with ``ONE_OF`` is a tagged union and a
class with ``KEY_ALIASES`` maps JSON keys to field names.

Every string value is ``${VAR}``-expanded (``_env``) before it is
interpreted, so numbers, sizes, booleans and choices may come from the
environment: ``"max_inflight_tasks": "${JOBS:-8}"``. For that reason a string
holding a plain integer, number or ``true``/``false`` is accepted where one
of those is expected. Missing keys take the model's default, which is
expanded the same way (so defaults may use ``${...}`` too).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, Literal, Union

from lre.config._env import ExpansionError, expand_env
from lre.config._model_fields import ByteSize, Seconds
from lre.config._paths import Path, Problem
from lre.config._units import parse_byte_size, parse_seconds

_INT_TEXT = re.compile(r"[+-]?\d+")


class _Invalid:
    """Marker for a value that could not be decoded (a problem was recorded)."""


INVALID: Any = _Invalid()


class Decoder:
    """Decodes one document; ``problems`` collects everything wrong with it."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.problems: list[Problem] = []

    def decode(self, tp: Any, raw: object, path: Path) -> Any:
        """``raw`` as an instance of ``tp``, or ``INVALID`` after recording why."""
        if isinstance(raw, str):
            try:
                raw = expand_env(raw, self.env)
            except ExpansionError as error:
                return self._fail(path, str(error))
        return self._decode_expanded(tp, raw, path)

    # -------------------------------------------------------------- dispatch

    def _fail(self, path: Path, message: str) -> Any:
        self.problems.append(Problem(path, message))
        return INVALID

    def _decode_expanded(self, tp: Any, raw: object, path: Path) -> Any:
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            return self._dataclass(tp, raw, path)
        origin = typing.get_origin(tp)
        if origin is Union or origin is types.UnionType:
            return self._union(typing.get_args(tp), raw, path)
        if origin is Literal:
            return self._literal(typing.get_args(tp), raw, path)
        if origin is tuple:
            return self._tuple(typing.get_args(tp)[0], raw, path)
        if origin is dict:
            return self._dict(typing.get_args(tp)[1], raw, path)
        reason = scalar_problem(tp, raw)
        if isinstance(reason, str):
            return self._fail(path, f"{reason}, got {describe_value(raw)}")
        return reason[0]

    def _union(self, options: tuple[Any, ...], raw: object, path: Path) -> Any:
        if raw is None and type(None) in options:
            return None
        options = tuple(option for option in options if option is not type(None))
        if len(options) == 1:
            return self._decode_expanded(options[0], raw, path)
        reasons: list[str] = []
        for option in options:
            trial = Decoder(self.env)
            value = trial._decode_expanded(option, raw, path)
            if value is not INVALID:
                self.problems.extend(trial.problems)
                return value
            if accepts_kind(option, raw):
                reason = scalar_problem(option, raw)
                if isinstance(reason, str):
                    reasons.append(reason)
        expected = " or ".join(describe_type(option) for option in options)
        detail = f" ({'; '.join(reasons)})" if len(reasons) == 1 else ""
        return self._fail(path, f"expected {expected}, got {describe_value(raw)}{detail}")

    def _literal(self, choices: tuple[Any, ...], raw: object, path: Path) -> Any:
        if isinstance(raw, str) and raw in choices:
            return raw
        expected = ", ".join(json.dumps(choice) for choice in choices)
        message = f"expected one of {expected}, got {describe_value(raw)}"
        if isinstance(raw, str):
            close = difflib.get_close_matches(raw, [str(c) for c in choices], n=1)
            if close:
                message += f"; did you mean {json.dumps(close[0])}?"
        return self._fail(path, message)

    def _tuple(self, item: Any, raw: object, path: Path) -> Any:
        if not isinstance(raw, list):
            return self._fail(path, f"expected a list, got {describe_value(raw)}")
        items = [self.decode(item, value, (*path, i)) for i, value in enumerate(raw)]
        if any(value is INVALID for value in items):
            return INVALID
        return tuple(items)

    def _dict(self, item: Any, raw: object, path: Path) -> Any:
        if not isinstance(raw, dict):
            return self._fail(path, f"expected an object, got {describe_value(raw)}")
        out = {key: self.decode(item, value, (*path, key)) for key, value in raw.items()}
        if any(value is INVALID for value in out.values()):
            return INVALID
        return out

    def _dataclass(self, cls: type, raw: object, path: Path) -> Any:
        if not isinstance(raw, dict):
            return self._fail(path, f"expected an object, got {describe_value(raw)}")
        fields = model_fields(cls)
        aliases: dict[str, str] = getattr(cls, "KEY_ALIASES", {})
        json_keys = {aliases_inverse(aliases).get(name, name): name for name in fields}
        retired: Mapping[str, str] = getattr(cls, "RETIRED_KEYS", {})
        for key in raw:
            if key in retired:
                self._fail((*path, key), retired[key])
            elif key not in json_keys:
                self._fail((*path, key), unknown_key_message(cls, key))
        kwargs: dict[str, Any] = {}
        for json_key, name in json_keys.items():
            field = fields[name]
            if json_key in raw:
                kwargs[name] = self.decode(field.type, raw[json_key], (*path, json_key))
            elif has_default(field.field):
                default = to_raw(default_of(field.field))
                kwargs[name] = self.decode(field.type, default, (*path, json_key))
            else:
                kwargs[name] = self._fail((*path, json_key), "required key is missing")
        one_of: tuple[str, ...] = getattr(cls, "ONE_OF", ())
        if one_of:
            given = [name for name in one_of if kwargs.get(name) is not None]
            if len(given) != 1:
                choices = ", ".join(one_of)
                found = "none was" if not given else " and ".join(given) + " were"
                self._fail(path, f"exactly one of {choices} must be given; {found}")
                return INVALID
        if any(value is INVALID for value in kwargs.values()):
            return INVALID
        return cls(**kwargs)


# ------------------------------------------------------------------ helpers


@dataclasses.dataclass(frozen=True, slots=True)
class ModelField:
    """A dataclass field with its type hint resolved to a real type."""

    field: dataclasses.Field[Any]
    type: Any

    @property
    def name(self) -> str:
        return self.field.name

    @property
    def doc(self) -> str:
        return str(self.field.metadata.get("doc", ""))


@cache
def model_fields(cls: type) -> dict[str, ModelField]:
    """The fields of dataclass ``cls`` by name, in declaration order."""
    hints = typing.get_type_hints(cls)
    return {field.name: ModelField(field, hints[field.name]) for field in dataclasses.fields(cls)}


def aliases_inverse(aliases: Mapping[str, str]) -> dict[str, str]:
    """Field name -> JSON key for the aliased fields."""
    return {name: key for key, name in aliases.items()}


def json_key_of(cls: type, name: str) -> str:
    """The JSON key of field ``name`` of ``cls``."""
    aliases: dict[str, str] = getattr(cls, "KEY_ALIASES", {})
    return aliases_inverse(aliases).get(name, name)


def has_default(field: dataclasses.Field[Any]) -> bool:
    return (
        field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
    )


def default_of(field: dataclasses.Field[Any]) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def to_raw(value: Any, *, escape: bool = False) -> Any:
    """A model value as plain JSON data; ``escape`` doubles ``$`` in strings so
    the data survives ``${VAR}`` expansion unchanged. None-valued fields are
    left out."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        cls = type(value)
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if item is not None:
                out[json_key_of(cls, field.name)] = to_raw(item, escape=escape)
        return out
    if isinstance(value, tuple | list):
        return [to_raw(item, escape=escape) for item in value]
    if isinstance(value, dict):
        return {key: to_raw(item, escape=escape) for key, item in value.items()}
    if isinstance(value, str) and escape:
        return value.replace("$", "$$")
    return value


def unknown_key_message(cls: type, key: str) -> str:
    """Say that ``key`` is not a key of ``cls``, suggesting the closest key of
    ``cls`` or, failing that, of an object nested one level below it."""
    known = [json_key_of(cls, name) for name in model_fields(cls)]
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean '{close[0]}'?"
    nested: dict[str, str] = {}
    for name, field in model_fields(cls).items():
        for option in (field.type, *typing.get_args(field.type)):
            if dataclasses.is_dataclass(option) and isinstance(option, type):
                for inner in model_fields(option):
                    nested.setdefault(json_key_of(option, inner), f"{json_key_of(cls, name)}.")
    close = difflib.get_close_matches(key, list(nested), n=1, cutoff=0.75)
    if close:
        return f"unknown key; did you mean '{nested[close[0]]}{close[0]}'?"
    return f"unknown key; expected one of {', '.join(sorted(known))}"


def scalar_problem(tp: Any, raw: object) -> str | tuple[Any]:
    """Decode a scalar: ``(value,)`` on success, else the reason (no value)."""
    try:
        if tp is ByteSize:
            return (ByteSize(parse_byte_size(raw)),)
        if tp is Seconds:
            return (Seconds(parse_seconds(raw)),)
    except ValueError as error:
        return str(error)
    if tp is str:
        return (raw,) if isinstance(raw, str) else "expected a string"
    if tp is bool:
        if isinstance(raw, bool):
            return (raw,)
        if raw in ("true", "false"):
            return (raw == "true",)
        return "expected true or false"
    if tp is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return (raw,)
        if isinstance(raw, str) and _INT_TEXT.fullmatch(raw.strip()):
            return (int(raw),)
        return "expected an integer"
    if tp is float:
        number: object = raw
        if isinstance(raw, str):
            try:
                number = float(raw)
            except ValueError:
                return "expected a number"
        if (
            isinstance(number, int | float)
            and not isinstance(number, bool)
            and math.isfinite(number)
        ):
            return (float(number),)
        return "expected a finite number"
    raise TypeError(f"the config decoder does not support type {tp!r}")


def accepts_kind(tp: Any, raw: object) -> bool:
    """Whether the reason ``tp`` rejected ``raw`` is worth adding to a union's
    message (only sizes and durations say more than "expected X")."""
    if tp is ByteSize or tp is Seconds:
        return isinstance(raw, int | float | str) and not isinstance(raw, bool)
    return False


def describe_type(tp: Any) -> str:
    """A short phrase for the values ``tp`` accepts, for messages and docs."""
    origin = typing.get_origin(tp)
    if tp is ByteSize:
        return 'a size (bytes, or a string such as "512MiB")'
    if tp is Seconds:
        return 'a duration (seconds, or a string such as "1h2m")'
    if origin is Literal:
        return " or ".join(json.dumps(choice) for choice in typing.get_args(tp))
    simple = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
    if tp in simple:
        return simple[tp]
    if origin is tuple:
        return "a list"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "an object"
    return str(tp)


def describe_value(raw: object) -> str:
    """``raw`` for an error message: scalars as JSON (shortened), containers by kind."""
    if isinstance(raw, dict):
        return "an object"
    if isinstance(raw, list):
        return "a list"
    text = json.dumps(raw)
    return text if len(text) <= 80 else text[:77] + "..."
