"""Read a JSON5 config file into a validated ``Config``.

Steps: parse JSON5 (duplicate keys refused) -> decode into the models
(``_decode``: types, unknown keys, ``${VAR}`` expansion, defaults, ONE_OF)
-> cross-reference and value checks (``_checks``). Every problem of a step is
collected; the first step that finds any raises them all as one
``ConfigError``, each message prefixed with ``source:line:`` (the line is
found by a best-effort scan of the text, ``_positions``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path as FilePath
from typing import Any

import json5

from lre.config._checks import check_config
from lre.config._decode import INVALID, Decoder
from lre.config._errors import ConfigError
from lre.config._models import Config
from lre.config._paths import Problem
from lre.config._positions import line_index, line_of

#: Shown as the source of the embedded default config in messages.
DEFAULT_SOURCE = "<embedded default>"


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Load and validate the config file at ``path``, merged over the embedded
    default (``merge_over_default``: a partial file, even ``{}``, is valid).

    ``env`` is used for ``${VAR}`` expansion (default: ``os.environ``).
    Raises ``ConfigError`` if the file cannot be read or is invalid.
    """
    try:
        text = FilePath(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError([f"{os.fspath(path)}: cannot read the config: {error}"]) from error
    source = os.fspath(path)
    own = parse_json5(text, source)
    raw = merge_over_default(own, source)
    try:
        return _validate(raw, text, source, env)
    except ConfigError as error:
        raise ConfigError([*error.messages, *_list_hints(own, error.messages, source)]) from None


#: Top-level lists a file replaces whole (``merge_over_default`` merges only objects).
_LISTS = ("stores", "schedulers", "workers", "servers")


def _list_hints(own: Any, messages: Sequence[str], source: str) -> list[str]:
    """One note per top-level list the file gives whose entries miss required
    keys: the file's list replaces the default's whole, which a user who
    meant to change one field does not expect."""
    if not isinstance(own, Mapping):
        return []
    hints = []
    for key in _LISTS:
        if key in own and any(
            f" {key}[" in m and m.endswith("required key is missing") for m in messages
        ):
            hints.append(
                f"{source}: note: your `{key}` list replaces the embedded default's whole "
                "list (lists are not merged, objects are); give each entry every required "
                "key, or start from the default's entries (`lre config show`)"
            )
    return hints


def merge_over_default(raw: Any, source: str) -> Any:
    """The user's document ``raw`` laid over the embedded default: objects are
    merged key by key (recursively), anything else (lists such as ``stores``
    or ``workers``, numbers, strings) replaces the default's value. So ``{}``
    is the default, and a file that gives ``stores`` gives all of them.
    ``ConfigError`` when ``raw`` is not an object."""
    if not isinstance(raw, dict):
        raise ConfigError([f"{source}: the config must be an object ({{...}})"])
    return _merged(parse_json5(default_config_text(), DEFAULT_SOURCE), raw)


def _merged(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for key, value in over.items():
            out[key] = _merged(base[key], value) if key in base else value
        return out
    return over


#: Where lre looks for a config file when ``--config`` is not given.
CONFIG_ENV = "LRE_CONFIG"


def find_config_file(env: Mapping[str, str] | None = None) -> FilePath | None:
    """The config file to use without ``--config``: ``$LRE_CONFIG`` (which must
    exist), else ``$XDG_CONFIG_HOME/lre/config.json5`` (default
    ``~/.config``) when it exists, else None (the embedded default).
    ``ConfigError`` when ``$LRE_CONFIG`` names no file."""
    env = os.environ if env is None else env
    named = env.get(CONFIG_ENV, "")
    if named:
        if not FilePath(named).is_file():
            raise ConfigError([f"{CONFIG_ENV}={named}: no such config file"])
        return FilePath(named)
    base = env.get("XDG_CONFIG_HOME") or (
        os.path.join(env["HOME"], ".config") if env.get("HOME") else ""
    )
    if not base:
        return None
    candidate = FilePath(base) / "lre" / "config.json5"
    return candidate if candidate.is_file() else None


def load_config_text(
    text: str, source: str = "<string>", env: Mapping[str, str] | None = None
) -> Config:
    """Parse and validate JSON5 ``text`` as a complete config (nothing merged);
    ``source`` names it in messages.

    Raises ``ConfigError`` listing every problem found.
    """
    return _validate(parse_json5(text, source), text, source, env)


def _validate(raw: Any, text: str, source: str, env: Mapping[str, str] | None) -> Config:
    decoder = Decoder(os.environ if env is None else env)
    config = decoder.decode(Config, raw, ())
    if decoder.problems or config is INVALID:
        raise ConfigError(_render(decoder.problems, text, source))
    problems = check_config(config)
    if problems:
        raise ConfigError(_render(problems, text, source))
    assert isinstance(config, Config)
    return config


def parse_json5(text: str, source: str) -> Any:
    """Parse ``text``; duplicate keys are refused.

    Plain JSON (a subset of JSON5) takes the fast standard-library parser;
    anything else goes to json5, which is much slower. Raises ``ConfigError``
    with the parser's message (it names line and column).
    """
    try:
        return json.loads(text, object_pairs_hook=_refuse_duplicates)
    except ValueError:
        pass
    try:
        return json5.loads(text, allow_duplicate_keys=False)
    except ValueError as error:
        raise ConfigError(
            [f"{_where(source, str(error))}: not valid JSON5: {_what(str(error))}"]
        ) from error


#: json5's messages: "<string>:LINE MESSAGE at column COLUMN" (the column part optional).
_JSON5_ERROR = re.compile(r"^<string>:(\d+) (.*?)(?: at column (\d+))?$", re.DOTALL)


def _where(source: str, message: str) -> str:
    """``source:LINE:COLUMN`` from json5's message (json5 names the text ``<string>``)."""
    match = _JSON5_ERROR.match(message)
    if match is None:
        return source
    return f"{source}:{match[1]}" + (f":{match[3]}" if match[3] else "")


def _what(message: str) -> str:
    """json5's message without its ``<string>:LINE`` and column parts."""
    match = _JSON5_ERROR.match(message)
    return message if match is None else match[2]


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def default_config_text() -> str:
    """The JSON5 text of the embedded default config (``lre/config/default.json5``)."""
    return resources.files("lre.config").joinpath("default.json5").read_text(encoding="utf-8")


def default_config(env: Mapping[str, str] | None = None) -> Config:
    """The embedded laptop config, used when no file is given.

    Raises ``ConfigError`` when the environment leaves a path undefined
    (neither ``LRE_HOME``, ``XDG_CACHE_HOME`` nor ``HOME`` set).
    """
    return load_config_text(default_config_text(), source=DEFAULT_SOURCE, env=env)


def _render(problems: Sequence[Problem], text: str, source: str) -> list[str]:
    lines = line_index(text)
    out: list[str] = []
    for problem in problems:
        line = line_of(problem.path, lines)
        where = f"{source}:{line}" if line is not None else source
        out.append(f"{where}: {problem.render()}")
    return out


def value_origins(path: str | os.PathLike[str] | None) -> dict[tuple[str | int, ...], str]:
    """Where each value set in a document came from, by its path in the
    document: the file at ``path`` (merged over the default, as
    ``load_config`` does) or ``DEFAULT_SOURCE``. A path absent from the
    result has the model's built-in default. ``ConfigError`` as ``load_config``."""
    default = parse_json5(default_config_text(), DEFAULT_SOURCE)
    origins: dict[tuple[str | int, ...], str] = {}
    _mark(default, (), DEFAULT_SOURCE, origins)
    if path is not None:
        source = os.fspath(path)
        try:
            text = FilePath(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError([f"{source}: cannot read the config: {error}"]) from error
        raw = parse_json5(text, source)
        for key, value in raw.items() if isinstance(raw, dict) else ():
            if not isinstance(value, dict):  # replaced whole: nothing of the default's stays
                for old in [p for p in origins if p[:1] == (key,)]:
                    del origins[old]
        _mark(raw, (), source, origins)
    return origins


def _mark(
    value: Any, at: tuple[str | int, ...], source: str, out: dict[tuple[str | int, ...], str]
) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _mark(item, (*at, key), source, out)
    elif isinstance(value, list):
        for old in [p for p in out if p[: len(at)] == at and len(p) > len(at)]:
            del out[old]
        for index, item in enumerate(value):
            _mark(item, (*at, index), source, out)
    else:
        out[at] = source
