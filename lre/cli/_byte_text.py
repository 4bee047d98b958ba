"""Byte counts as people read and type them on the command line."""

from __future__ import annotations

import typer

from lre.config import parse_byte_size

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(count: int) -> str:
    """``1536`` -> ``"1.5 KiB"``, ``999`` -> ``"999 B"`` (powers of 1024)."""
    if count < 1024:
        return f"{count} B"
    amount = count / 1024
    step = 0
    while amount >= 1024 and step < len(_UNITS) - 1:
        amount /= 1024
        step += 1
    unit = _UNITS[step]
    return f"{amount:.1f} {unit}" if amount < 100 else f"{amount:.0f} {unit}"


def size_option(value: str) -> int:
    """Parse a size option (``10G``, ``500MiB``, ``1073741824``); a bad one is
    refused with ``typer.BadParameter`` naming the value and what is wrong."""
    try:
        return parse_byte_size(value.strip())
    except ValueError as error:
        raise typer.BadParameter(f"{value!r} is not a size: {error}") from None
