"""Noticing kernel OOM kills without dmesg.

The kernel counts OOM kills in ``/proc/vmstat`` (``oom_kill``, whole host)
and per memory cgroup (``memory.events`` on cgroup v2,
``memory.oom_control`` on v1). ``OomCounters.read()`` takes a snapshot of
every counter that can be read; an action that died of SIGKILL that lre did
not send while one of them grew is reported as OOM-killed. This is a
heuristic: when two actions die at once both may be blamed.
"""

from __future__ import annotations

import time
from pathlib import Path


def _counter(path: Path, key: str) -> int | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _cgroup_files() -> list[Path]:
    files: list[Path] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return files
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            files.append(Path("/sys/fs/cgroup") / relative / "memory.events")
        elif "memory" in controllers.split(","):
            files.append(Path("/sys/fs/cgroup/memory") / relative / "memory.oom_control")
            # Inside a cgroup namespace the own group is mounted as the root.
            files.append(Path("/sys/fs/cgroup/memory/memory.oom_control"))
    return files


class OomCounters:
    """Snapshots of the OOM-kill counters this process can see."""

    def __init__(self) -> None:
        self._sources: list[Path] = [
            p for p in _cgroup_files() if _counter(p, "oom_kill") is not None
        ]
        if _counter(Path("/proc/vmstat"), "oom_kill") is not None:
            self._sources.append(Path("/proc/vmstat"))
        self._cached: tuple[int, ...] | None = None
        self._cached_at = 0.0

    @property
    def available(self) -> bool:
        return bool(self._sources)

    def read(self) -> tuple[int, ...]:
        """Current values, one per source (unreadable sources count as 0)."""
        return tuple(_counter(p, "oom_kill") or 0 for p in self._sources)

    def read_recent(self, max_age: float = 1.0) -> tuple[int, ...]:
        """Like ``read`` but reuses a snapshot up to ``max_age`` seconds old.

        Used for the "before" value of each action, so starting an action
        costs no file reads most of the time (the kill check at the end of an
        unexplained SIGKILL still reads fresh values).
        """
        now = time.monotonic()
        if self._cached is None or now - self._cached_at > max_age:
            self._cached = self.read()
            self._cached_at = now
        return self._cached

    @staticmethod
    def grew(before: tuple[int, ...], after: tuple[int, ...]) -> bool:
        return any(b > a for a, b in zip(before, after, strict=False))
