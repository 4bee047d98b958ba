"""Shared helpers for the config tests."""

from __future__ import annotations

import pytest

from lre.config import Config, ConfigError
from lre.config._loader import load_config_text

ENV = {"HOME": "/home/dev"}

MINIMAL = """
{
  stores: [
    { name: "cas", filesystem: { content_path: "/data/cas" } },
    { name: "ac", memory: {} },
  ],
  schedulers: [{ name: "queue", simple: { ac_store: "ac", cas_store: "cas" } }],
  workers: [
    { local: { name: "w", scheduler: "queue", cas_store: "cas", work_directory: "/data/work" } },
  ],
  servers: [{ instances: [{ cas_store: "cas", ac_store: "ac", scheduler: "queue" }] }],
}
"""


def load(text: str, env: dict[str, str] | None = None) -> Config:
    return load_config_text(text, source="test.json5", env=ENV if env is None else env)


def problems(text: str, env: dict[str, str] | None = None) -> list[str]:
    """The messages a broken config produces (fails if it loads)."""
    with pytest.raises(ConfigError) as caught:
        load(text, env)
    assert caught.value.messages
    return list(caught.value.messages)
