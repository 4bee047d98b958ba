"""Sizes and durations written as numbers or as strings with units.

Sizes (``ByteSize`` fields): a non-negative integer number of bytes, or a
string ``<number><unit>``. Units are case-insensitive. ``KB``, ``MB``, ``GB``,
``TB``, ``PB`` are decimal (powers of 1000); ``KiB``, ``MiB``, ``GiB``,
``TiB``, ``PiB`` and the one-letter forms ``K``, ``M``, ``G``, ``T``, ``P`` are
binary (powers of 1024); ``B`` or no unit means bytes. Fractions are allowed
(``"1.5GB"``) and rounded down to a whole byte.

Durations (``Seconds`` fields): a non-negative number of seconds, or a string
of one or more ``<number><unit>`` parts with units ``ms``, ``s``, ``m``,
``h``, ``d``: ``"250ms"``, ``"30s"``, ``"1h2m"``, ``"1.5h"``. A bare number
in a string means seconds.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "pb": 1000**5,
    "k": 1 << 10,
    "m": 1 << 20,
    "g": 1 << 30,
    "t": 1 << 40,
    "p": 1 << 50,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "pib": 1 << 50,
}

_SIZE_TEXT = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*([A-Za-z]*)\s*")

_DURATION_UNITS: dict[str, Fraction] = {
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
    "d": Fraction(86400),
}
_DURATION_PART = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m|h|d)", re.IGNORECASE)

#: Binary units used when printing sizes, largest first.
_FORMAT_UNITS = (
    ("PiB", 1 << 50),
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
)

#: Decimal units used when printing sizes no binary unit divides, largest first.
_DECIMAL_FORMAT_UNITS = (
    ("PB", 1000**5),
    ("TB", 1000**4),
    ("GB", 1000**3),
    ("MB", 1000**2),
    ("KB", 1000),
)


def parse_byte_size(value: object) -> int:
    """Bytes meant by ``value`` (an int or a size string).

    Raises ``ValueError`` with a message saying what is wrong (negative,
    fractional number, unknown unit, not a size at all).
    """
    if isinstance(value, bool):
        raise ValueError("expected a size, got a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or value < 0 or not value.is_integer():
            raise ValueError("a size given as a number must be a whole number of bytes >= 0")
        return int(value)
    if not isinstance(value, str):
        raise ValueError('expected a size such as 1073741824 or "1GiB"')
    match = _SIZE_TEXT.fullmatch(value)
    if match is None:
        raise ValueError('expected a size such as 1073741824, "512MiB" or "10GB"')
    number, unit = match.groups()
    multiplier = _SIZE_UNITS.get(unit.lower())
    if multiplier is None:
        raise ValueError(
            f"unknown size unit {unit!r} (use B, KB, MB, GB, TB (powers of 1000) or "
            "KiB, MiB, GiB, TiB (powers of 1024))"
        )
    return int(Fraction(number) * multiplier)


def parse_seconds(value: object) -> float:
    """Seconds meant by ``value`` (a number or a duration string).

    Raises ``ValueError`` with a message saying what is wrong.
    """
    if isinstance(value, bool):
        raise ValueError("expected a duration, got a boolean")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError("a duration must be a finite number of seconds >= 0")
        return float(value)
    if not isinstance(value, str):
        raise ValueError('expected a duration such as 30, "250ms" or "1h2m"')
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return parse_seconds(seconds)
    total = Fraction(0)
    position = 0
    while position < len(text):
        match = _DURATION_PART.match(text, position)
        if match is None:
            raise ValueError(
                'expected a duration such as 30, "250ms", "30s" or "1h2m" (units ms, s, m, h, d)'
            )
        total += Fraction(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]
        position = match.end()
    if not text:
        raise ValueError("expected a duration, got an empty string")
    return float(total)


def format_byte_size(size: int) -> int | str:
    """``size`` as a size string that parses back to exactly ``size``, so that
    every size lre prints reads the same way: a whole number of the largest
    binary unit below 10000 (``"10GiB"``, ``"1536MiB"``), else of a decimal
    unit (``"4MB"``), else a short fraction of a binary unit (``"19.125GiB"``),
    else a whole number of MiB or KiB (``"16030MiB"``), else bytes (``"123B"``).
    0 stays the int 0 (it means "none" or "off" where it is allowed)."""
    if size == 0:
        return 0
    for unit, multiplier in _FORMAT_UNITS:
        if size % multiplier == 0 and size // multiplier < 10000:
            return f"{size // multiplier}{unit}"
    for unit, multiplier in _DECIMAL_FORMAT_UNITS:
        if size % multiplier == 0 and size // multiplier < 10000:
            return f"{size // multiplier}{unit}"
    for unit, multiplier in _FORMAT_UNITS:
        if size > multiplier and size % multiplier and (size * 1000) % multiplier == 0:
            whole, thousandths = divmod(size * 1000 // multiplier, 1000)
            return f"{whole}.{thousandths:03d}".rstrip("0") + unit
    for unit, multiplier in _FORMAT_UNITS:
        if size % multiplier == 0:
            return f"{size // multiplier}{unit}"
    return f"{size}B"


#: Duration units used when printing, largest first, in milliseconds.
_FORMAT_DURATION_UNITS = (
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1000),
    ("ms", 1),
)


def format_seconds(seconds: float) -> float | str:
    """``seconds`` as a duration string that parses back to exactly
    ``seconds`` (``"3h"``, ``"1h2m"``, ``"250ms"``), so that durations read
    like the sizes beside them. A value that is not a whole number of
    milliseconds stays the number it is, and 0 stays the int 0."""
    if seconds == 0:
        return 0
    millis = round(seconds * 1000)
    if millis <= 0 or millis / 1000 != seconds:
        return seconds
    parts = []
    for unit, size in _FORMAT_DURATION_UNITS:
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    text = "".join(parts)
    return text if parse_seconds(text) == seconds else seconds
