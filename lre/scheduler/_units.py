"""The one place where platform-property strings become reservation units.

Inside lre, CPU is counted in thousandths of a CPU ("millicpus") and memory in
bytes. Clients write ``cpu_count`` in whole CPUs (``"2"``; a decimal such as
``"0.5"`` is accepted too) and ``memory_kb`` in KiB. Converting only here, and
only from the property's name, makes the unit mix-up of a deployment that
reserved ``cpu_time_ms * 1000 / wall_ms`` as whole CPUs impossible: no other
code parses these values.

The estimates other clients send (Bazel's ``resources:cpu`` / ``resources:memory``,
the ``Estimated*`` family) are converted here too (``estimate_of``), each from
its own unit.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal, InvalidOperation

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


def _decimal(value: str, field: str, shown: str | None = None) -> Decimal:
    """``value`` as a finite non-negative number; errors name ``field`` and
    ``shown`` (the whole value as the client wrote it, default ``value``)."""
    shown = value if shown is None else shown
    try:
        number = Decimal(value.strip())
    except (InvalidOperation, ValueError):
        raise InvalidArgument(f"platform property {field}={shown!r}: not a number") from None
    if not number.is_finite() or number < 0:
        raise InvalidArgument(f"platform property {field}={shown!r}: must be >= 0")
    return number


# ------------------------------------------------------------------ estimates

#: Bazel (9.2 and later) reads these from ``exec_properties`` for its own local
#: scheduling: CPUs (a decimal) and memory in MB (Bazel's MB are MiB).
BAZEL_CPU_PROPERTY = "resources:cpu"
BAZEL_MEMORY_PROPERTY = "resources:memory"
#: BuildBuddy-style estimates: CPUs (``"2"``, ``"0.5"``, ``"4000m"``), memory
#: with a unit (``"1M"``, ``"2GB"``, ``"4.5GB"``, ``"512MiB"``), and compute units
#: (one = 1 CPU and 2.5 GB).
ESTIMATED_CPU_PROPERTY = "EstimatedCPU"
ESTIMATED_MEMORY_PROPERTY = "EstimatedMemory"
ESTIMATED_UNITS_PROPERTY = "EstimatedComputeUnits"
#: Every property read as an estimate of what an action needs (``estimate_of``).
ESTIMATE_PROPERTIES = frozenset(
    {
        BAZEL_CPU_PROPERTY,
        BAZEL_MEMORY_PROPERTY,
        ESTIMATED_CPU_PROPERTY,
        ESTIMATED_MEMORY_PROPERTY,
        ESTIMATED_UNITS_PROPERTY,
    }
)

_COMPUTE_UNIT_MEMORY = 2_500_000_000
_MEMORY_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1 << 10,
    "kib": 1 << 10,
    "mi": 1 << 20,
    "mib": 1 << 20,
    "gi": 1 << 30,
    "gib": 1 << 30,
    "ti": 1 << 40,
    "tib": 1 << 40,
}


def estimate_of(key: str, value: str) -> tuple[int, int]:
    """The (millicpus, memory bytes) one estimate property says an action
    needs; 0 for what it does not speak of. ``key`` must be one of
    ``ESTIMATE_PROPERTIES``.

    Raises ``InvalidArgument`` naming the property and the value when the
    value is not a non-negative number in the property's unit, and
    ``ValueError`` for a key that is not an estimate property.
    """
    if key == BAZEL_CPU_PROPERTY:
        return _whole(_decimal(value, key) * MILLICPUS_PER_CPU), 0
    if key == BAZEL_MEMORY_PROPERTY:
        return 0, _whole(_decimal(value, key) * (1 << 20))
    if key == ESTIMATED_CPU_PROPERTY:
        text = value.strip()
        if text[-1:] in ("m", "M"):
            return _whole(_decimal(text[:-1], key, value)), 0
        return _whole(_decimal(text, key) * MILLICPUS_PER_CPU), 0
    if key == ESTIMATED_MEMORY_PROPERTY:
        text = value.strip()
        number = text.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        unit = _MEMORY_UNITS.get(text[len(number) :].strip().lower())
        if unit is None:
            raise InvalidArgument(
                f"platform property {key}={value!r}: unknown unit (use B, KB, MB, GB, TB "
                "or KiB, MiB, GiB, TiB)"
            )
        return 0, _whole(_decimal(number, key, value) * unit)
    if key == ESTIMATED_UNITS_PROPERTY:
        units = _decimal(value, key)
        return _whole(units * MILLICPUS_PER_CPU), _whole(units * _COMPUTE_UNIT_MEMORY)
    raise ValueError(f"{key!r} is not an estimate property")


def _whole(number: Decimal) -> int:
    """Round an amount up to a whole unit (an estimate never shrinks)."""
    return int(number.to_integral_value(rounding=ROUND_CEILING))
