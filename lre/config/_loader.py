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
    """Load and validate the config file at ``path``.

    ``env`` is used for ``${VAR}`` expansion (default: ``os.environ``).
    Raises ``ConfigError`` if the file cannot be read or is invalid.
    """
    try:
        text = FilePath(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError([f"{os.fspath(path)}: cannot read the config: {error}"]) from error
    return load_config_text(text, source=os.fspath(path), env=env)


def load_config_text(
    text: str, source: str = "<string>", env: Mapping[str, str] | None = None
) -> Config:
    """Parse and validate JSON5 ``text``; ``source`` names it in messages.

    Raises ``ConfigError`` listing every problem found.
    """
    raw = parse_json5(text, source)
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
        raise ConfigError([f"{source}: not valid JSON5: {error}"]) from error


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
