"""PressureMonitor: cached host memory readings."""

from __future__ import annotations

from lre.worker.memory._pressure import PressureMonitor


def test_last_reading_of_a_fresh_monitor_is_a_real_reading() -> None:
    calls: list[int] = []

    def available() -> int:
        calls.append(1)
        return 5 << 30

    monitor = PressureMonitor(1 << 30, available=available, pressure=lambda: 1.5)
    reading = monitor.last_reading
    assert reading.available_bytes == 5 << 30
    assert reading.pressure_full_avg10 == 1.5
    # Later calls do not read again.
    assert monitor.last_reading.available_bytes == 5 << 30
    assert len(calls) == 1


def test_last_reading_follows_read() -> None:
    values = iter([3 << 30, 2 << 30])
    monitor = PressureMonitor(0, available=lambda: next(values), pressure=lambda: None, cache_s=0)
    assert monitor.read().available_bytes == 3 << 30
    assert monitor.last_reading.available_bytes == 3 << 30
    assert monitor.read().available_bytes == 2 << 30
    assert monitor.last_reading.available_bytes == 2 << 30
