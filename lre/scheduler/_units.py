"""The one place where platform-property strings become reservation units.

Inside lre, CPU is counted in thousandths of a CPU ("millicpus") and memory in
bytes. Clients write ``cpu_count`` in whole CPUs (``"2"``; a decimal such as
``"0.5"`` is accepted too) and ``memory_kb`` in KiB. Converting only here, and
only from the property's name, makes the unit mix-up of a deployment that
reserved ``cpu_time_ms * 1000 / wall_ms`` as whole CPUs impossible: no other
code parses these values.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from lre.errors import InvalidArgument

#: Platform key holding CPUs (whole CPUs on the wire).
CPU_PROPERTY = "cpu_count"
#: Platform key holding memory (KiB on the wire).
MEMORY_PROPERTY = "memory_kb"

MILLICPUS_PER_CPU = 1000


def millicpus_from_cpu_count(value: str, *, field: str = CPU_PROPERTY) -> int:
    """``"2"`` -> 2000, ``"0.5"`` -> 500.

    Raises ``InvalidArgument`` naming ``field`` and the value when it is not a
    non-negative number or has more than three decimals.
    """
    number = _decimal(value, field)
    millicpus = number * MILLICPUS_PER_CPU
    if millicpus != millicpus.to_integral_value():
        raise InvalidArgument(
            f"platform property {field}={value!r}: at most 3 decimals (thousandths of a CPU)"
        )
    return int(millicpus)


def bytes_from_memory_kb(value: str, *, field: str = MEMORY_PROPERTY) -> int:
    """``"1024"`` -> 1048576. Raises ``InvalidArgument`` like ``millicpus_from_cpu_count``."""
    number = _decimal(value, field)
    if number != number.to_integral_value():
        raise InvalidArgument(f"platform property {field}={value!r}: must be a whole number")
    return int(number) * 1024


def amount_from_property(value: str, *, field: str) -> int:
    """Any other ``minimum`` property: a whole non-negative number, kept as is."""
    number = _decimal(value, field)
    if number != number.to_integral_value():
        raise InvalidArgument(f"platform property {field}={value!r}: must be a whole number")
    return int(number)


def cpu_count_text(millicpus: int) -> str:
    """Render millicpus in the clients' unit: 2000 -> ``"2"``, 500 -> ``"0.5"``."""
    whole, rest = divmod(millicpus, MILLICPUS_PER_CPU)
    return str(whole) if rest == 0 else str(Decimal(millicpus) / MILLICPUS_PER_CPU)


def memory_text(memory_bytes: int) -> str:
    """Human form of a byte count: ``"512 MiB"``, ``"1.5 GiB"``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if memory_bytes >= size:
            shown = memory_bytes / size
            return f"{shown:.1f} {unit}" if shown != int(shown) else f"{int(shown)} {unit}"
    return f"{memory_bytes} B"


def _decimal(value: str, field: str) -> Decimal:
    try:
        number = Decimal(value.strip())
    except (InvalidOperation, ValueError):
        raise InvalidArgument(f"platform property {field}={value!r}: not a number") from None
    if not number.is_finite() or number < 0:
        raise InvalidArgument(f"platform property {field}={value!r}: must be >= 0")
    return number
