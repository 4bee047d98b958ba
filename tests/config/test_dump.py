"""dump_config writes JSON5 that loads back to an equal config."""

from __future__ import annotations

from pathlib import Path

import json5
import pytest

from lre.config import HostFacts, default_config, dump_config, load_config, resolve
from lre.config._loader import load_config_text
from lre.config._units import format_seconds, parse_seconds

from .conftest import MINIMAL, load

ROOT = Path(__file__).resolve().parents[2]
FACTS = HostFacts(cpu_count=4, total_memory=8 << 30, free_disk=lambda path: 100 << 30)


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.json5")), ids=lambda p: p.name)
def test_round_trip(path: Path) -> None:
    config = load_config(path, env={"HOME": "/home/dev"})
    assert load_config_text(dump_config(config), env={}) == config
    resolved = resolve(config, FACTS)
    assert load_config_text(dump_config(resolved), env={}) == resolved


def test_dump_uses_global_key_sizes_and_escapes_dollars() -> None:
    text = MINIMAL.replace('"/data/cas"', '"/data/$$cas"')
    config = load(text)
    dumped = dump_config(config)
    raw = json5.loads(dumped)
    assert "global" in raw and "global_" not in raw
    assert raw["stores"][0]["filesystem"]["content_path"] == "/data/$$cas"
    assert raw["stores"][0]["filesystem"]["read_buffer_size"] == "1MiB"
    assert raw["servers"][0]["max_batch_total_size_bytes"] == "4MB"
    assert "memory" not in raw["stores"][0]  # unset union members are left out
    policy = raw["stores"][0]["filesystem"]["eviction_policy"]
    assert policy["keep_told"] == "3h"  # durations with units too
    assert load_config_text(dumped, env={}) == config


def test_default_round_trips_resolved() -> None:
    resolved = resolve(default_config({"HOME": "/h"}), FACTS)
    dumped = dump_config(resolved)
    assert '"auto"' not in dumped
    assert load_config_text(dumped, env={}) == resolved


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(10800, "3h"), (3720.0, "1h2m"), (0.25, "250ms"), (90061.5, "1d1h1m1s500ms"), (0, 0)],
)
def test_durations_are_written_with_units_that_parse_back(seconds: float, text: object) -> None:
    assert format_seconds(seconds) == text
    if isinstance(text, str):
        assert parse_seconds(text) == seconds


def test_a_duration_finer_than_a_millisecond_stays_a_number() -> None:
    assert format_seconds(0.0001) == 0.0001
    assert format_seconds(1e-9) == 1e-9
