import pytest

from lre.config import parse_byte_size
from lre.config._units import format_byte_size, parse_seconds


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (0, 0),
        (1234, 1234),
        (4096.0, 4096),
        ("512", 512),
        ("100B", 100),
        ("10KB", 10_000),
        ("10kb", 10_000),
        ("512mb", 512_000_000),
        ("1.5GB", 1_500_000_000),
        ("2TB", 2 * 10**12),
        ("1KiB", 1024),
        ("512MiB", 512 << 20),
        ("10GiB", 10 << 30),
        ("10gib", 10 << 30),
        ("1.5GiB", 3 << 29),
        ("1g", 1 << 30),
        ("64M", 64 << 20),
        (" 3 MiB ", 3 << 20),
        ("1.0001KiB", 1024),  # rounded down
    ],
)
def test_sizes(text: object, expected: int) -> None:
    assert parse_byte_size(text) == expected


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("10XB", "unknown size unit 'XB'"),
        ("lots", "expected a size"),
        (-1, "negative"),
        (1.5, "whole number"),
        (True, "boolean"),
        ("", "expected a size"),
        ("-5MiB", "expected a size"),
        ([1], "expected a size"),
    ],
)
def test_bad_sizes(value: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_byte_size(value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (30, 30.0),
        (0.25, 0.25),
        ("45", 45.0),
        ("250ms", 0.25),
        ("30s", 30.0),
        ("2m", 120.0),
        ("1h2m", 3720.0),
        ("1h 2m 3s", 3723.0),
        ("1.5h", 5400.0),
        ("1d", 86400.0),
        ("1H30M", 5400.0),
    ],
)
def test_durations(text: object, expected: float) -> None:
    assert parse_seconds(text) == expected


@pytest.mark.parametrize("value", ["1y", "h", "", "1h2", "-3s", -1, float("inf"), "nan", False])
def test_bad_durations(value: object) -> None:
    with pytest.raises(ValueError):
        parse_seconds(value)


def test_format_byte_size_is_exact_and_short() -> None:
    assert format_byte_size(1 << 30) == "1GiB"
    assert format_byte_size(3 << 29) == "1536MiB"
    assert format_byte_size(4_000_000) == "4MB"
    assert format_byte_size(0) == 0
    assert format_byte_size(20_000 << 10) == "20000KiB"
    assert format_byte_size(19584 << 20) == "19.125GiB"
    assert format_byte_size(16030 << 20) == "16030MiB"
    assert format_byte_size(123) == "123B"
    assert format_byte_size(12_345_678_901) == "12345678901B"
    for size in (1 << 30, 3 << 29, 4_000_000, 123, 64 << 20, 19584 << 20, 1536, 12_345_678_901):
        assert parse_byte_size(format_byte_size(size)) == size
