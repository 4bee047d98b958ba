"""``HealthBoard``: why lre is unhealthy right now (``/status`` answers 503
while it holds a problem), and ``free_space_check`` for a nearly full disk."""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["HealthBoard", "HealthCheck", "free_space_check"]


HealthCheck = Callable[[], str | None]


class HealthBoard:
    """Why lre is unhealthy right now, keyed by what reported it.

    ``report("worker:local", "failed to start: ...")`` marks a problem;
    ``clear("worker:local")`` removes it. ``add_check(key, check)`` adds a
    callable evaluated at every snapshot (returns a reason, or None when
    fine), e.g. ``free_space_check``. ``/status`` answers 503 while any
    problem is held. Keys are free text chosen by the app (one per source).
    A check that raises ``OSError`` is itself reported as the problem.
    """

    def __init__(self) -> None:
        self._problems: dict[str, str] = {}
        self._checks: dict[str, HealthCheck] = {}

    def report(self, key: str, reason: str) -> None:
        self._problems[key] = reason

    def clear(self, key: str) -> None:
        self._problems.pop(key, None)

    def add_check(self, key: str, check: HealthCheck) -> None:
        self._checks[key] = check

    def problems(self) -> tuple[str, ...]:
        problems = dict(self._problems)
        for key, check in self._checks.items():
            try:
                reason = check()
            except OSError as exc:
                reason = f"check failed: {exc}"
            if reason is not None:
                problems[key] = reason
        return tuple(f"{key}: {reason}" for key, reason in sorted(problems.items()))


def free_space_check(path: str | os.PathLike[str], min_free_bytes: int) -> HealthCheck:
    """A check reporting when the filesystem holding ``path`` has less than
    ``min_free_bytes`` available (``os.statvfs``; errors propagate as OSError)."""

    def check() -> str | None:
        stat = os.statvfs(path)
        free = stat.f_bavail * stat.f_frsize
        if free < min_free_bytes:
            return (
                f"disk nearly full: {free} bytes free under {os.fspath(path)},"
                f" below {min_free_bytes}"
            )
        return None

    return check
