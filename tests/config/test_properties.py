"""Property tests: escaping and size formatting are exact inverses."""

from hypothesis import given
from hypothesis import strategies as st

from lre.config import parse_byte_size
from lre.config._env import escape_env, expand_env
from lre.config._units import format_byte_size


@given(st.text())
def test_escaped_text_expands_to_itself(text: str) -> None:
    assert expand_env(escape_env(text), {}) == text


@given(st.integers(min_value=0, max_value=1 << 62))
def test_formatted_sizes_parse_back(size: int) -> None:
    assert parse_byte_size(format_byte_size(size)) == size


@given(
    st.integers(min_value=0, max_value=10_000), st.sampled_from(["KiB", "MiB", "GiB", "KB", "MB"])
)
def test_unit_sizes(count: int, unit: str) -> None:
    multiplier = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1000, "MB": 10**6}[unit]
    assert parse_byte_size(f"{count}{unit}") == count * multiplier
    assert parse_byte_size(f"{count}{unit.lower()}") == count * multiplier
