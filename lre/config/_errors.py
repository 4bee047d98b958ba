"""The one exception the config loader raises."""

from __future__ import annotations

from collections.abc import Sequence


class ConfigError(Exception):
    """A config could not be read, parsed or validated.

    ``messages`` holds every problem found (not only the first), each naming
    the source, the line when known, the path and the offending value, e.g.
    ``lre.json5:12: stores[1].filesystem.max_byts: unknown key; did you mean
    'max_bytes'?``.
    """

    def __init__(self, messages: Sequence[str]) -> None:
        self.messages: tuple[str, ...] = tuple(messages)
        super().__init__("\n".join(self.messages))
