"""What lre was last started with, kept in its state directory: ``start.json``.

The serving ``lre up`` (foreground, or the child of ``--detach``) records,
once it listens, the config file it read (an absolute path; None for the
embedded default), the gRPC port it listens on, the knobs given on the
command line (``--cache-size``, ``--cpus``, ``--memory-budget``,
``--status-port``) and ``--log-level``. ``lre restart`` starts lre again
with them, running or stopped; ``lre up`` with a knob that differs from the
running lre's refuses (``differences``) instead of ignoring it.

A missing or unreadable file reads as None: lre then starts from its config
alone, as before the file existed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lre.cli._knobs import Knobs
from lre.cli._state_file import write_state_file
from lre.config import parse_byte_size

START_FILE = "start.json"
#: The resolved config the serving lre runs with ("auto" as it resolved it at
#: start, the knobs applied): what ``lre config show`` prints while it runs.
EFFECTIVE_FILE = "effective-config.json5"


@dataclass(frozen=True, slots=True)
class StartSettings:
    """See the module docstring."""

    config: str | None = None
    port: int | None = None
    knobs: Knobs = field(default_factory=Knobs)
    log_level: str | None = None


def record_start(state_dir: Path, settings: StartSettings) -> None:
    """Write ``start.json`` atomically (0600). Raises OSError."""
    write_state_file(state_dir, START_FILE, json.dumps(asdict(settings)))


def record_effective(state_dir: Path, text: str) -> None:
    """Write ``effective-config.json5`` atomically (0600). Raises OSError."""
    write_state_file(state_dir, EFFECTIVE_FILE, text)


def last_start(state_dir: Path) -> StartSettings | None:
    """The recorded settings, or None (no file, or one lre cannot read)."""
    try:
        data = json.loads((state_dir / START_FILE).read_text(encoding="utf-8"))
        knobs = Knobs(**data.pop("knobs"))
        settings = StartSettings(knobs=knobs, **data)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return settings


def _size(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_byte_size(text)
    except ValueError:
        return None


def differences(running: StartSettings, asked: Knobs) -> list[str]:
    """One sentence per knob given in ``asked`` that differs from what the
    running lre was started with (a knob it was started without runs with
    the config's value, which a given knob changes)."""
    out: list[str] = []
    for (flag, given), (_, shown) in zip(asked.flags(), running.knobs.flags(), strict=True):
        # sizes compare by their bytes: --cache-size 1G is --cache-size 1024M
        wanted = _size(given) if isinstance(given, str) else given
        has = _size(shown) if isinstance(shown, str) else shown
        if given is None or wanted == has:
            continue
        now = f"{flag} {shown}" if shown is not None else f"the config's value (no {flag})"
        out.append(f"{flag} {given}: lre runs with {now}")
    return out
