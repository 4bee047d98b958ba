"""Short, fixed-width text for numbers on the dashboard (bytes, durations, bars)."""

from __future__ import annotations

from rich.text import Text

_UNITS = ("B", "K", "M", "G", "T", "P")


def short_bytes(value: int | None) -> str:
    """``1536`` -> ``1.5K``, ``3 << 30`` -> ``3.0G``; ``None`` -> ``-`` (IEC units)."""
    if value is None:
        return "-"
    amount = float(value)
    for unit in _UNITS:
        if abs(amount) < 1024 or unit == _UNITS[-1]:
            if unit == "B":
                return f"{int(amount)}B"
            return f"{amount:.1f}{unit}" if abs(amount) < 100 else f"{amount:.0f}{unit}"
        amount /= 1024
    raise AssertionError("unreachable")


def short_duration(seconds: float) -> str:
    """``5.2`` -> ``5.2s``, ``65`` -> ``1m05s``, ``3725`` -> ``1h02m``, ``90000`` -> ``1d01h``."""
    if seconds < 0:
        seconds = 0.0
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def cpus(millicpus: int) -> str:
    """``2000`` -> ``2``, ``1500`` -> ``1.5``."""
    if millicpus % 1000 == 0:
        return str(millicpus // 1000)
    return f"{millicpus / 1000:.1f}"


def bar(fraction: float | None, width: int, style: str) -> Text:
    """A bar of ``width`` cells filled to ``fraction`` (clamped to 0..1) in
    ``style``; the rest is a dim track. ``None`` draws only the track."""
    if width <= 0:
        return Text()
    filled = 0 if fraction is None else round(max(0.0, min(1.0, fraction)) * width)
    text = Text()
    text.append("█" * filled, style=style)
    text.append("░" * (width - filled), style="grey37")
    return text


def usage_style(fraction: float | None) -> str:
    """Green below 75 %, yellow below 90 %, red from 90 % of a budget."""
    if fraction is None or fraction < 0.75:
        return "green"
    if fraction < 0.9:
        return "yellow"
    return "red"
