"""Whether an upstream is reachable: a circuit breaker with a visible state.

An upstream starts ``unknown``. A call that reaches it (any answer, even
NOT_FOUND) makes it ``up``; a call that fails to reach it after its retries
(UNAVAILABLE, DEADLINE_EXCEEDED, refused credentials) makes it ``down`` and
opens the circuit: for ``backoff`` seconds every call fails at once without
touching the network, so builds fall back to the local tier immediately.
After the backoff calls are let through again (half-open); another failure
doubles the backoff (up to ``max_backoff``), a success closes the circuit.

Each transition is logged once (a warning going down, info coming back)
and passed to ``on_change`` when set (the app makes it an ``upstream``
event); ``statistics()`` is what /status and the TUI show.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import trio

log = logging.getLogger("lre.upstream")

HealthState = Literal["unknown", "up", "down"]


@dataclass(frozen=True, slots=True)
class UpstreamStatistics:
    """A snapshot of one upstream connection, safe to read from any thread.

    ``healthy`` is False only while the upstream is known to be down (the
    build then runs local-only).
    """

    name: str
    address: str
    state: HealthState
    healthy: bool
    calls: int
    failed_calls: int
    retries: int
    transitions_down: int
    last_error: str
    #: What the users of this upstream counted (bounded keys), e.g. the
    #: read-through ``ac_hits``, ``ac_misses``, ``read_blobs``, ``read_bytes``.
    counters: Mapping[str, int] = field(default_factory=dict)


class UpstreamHealth:
    """The circuit breaker of one upstream; see the module docstring."""

    def __init__(
        self,
        name: str,
        address: str,
        *,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.name = name
        self.address = address
        self.base_backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.state: HealthState = "unknown"
        self._backoff_s = backoff_s
        self._open_until = 0.0
        self._down_since = 0.0
        self._last_error = ""
        self.calls = 0
        self.failed_calls = 0
        self.retries = 0
        self.transitions_down = 0
        #: Bumped by the stores using this upstream (see ``UpstreamStatistics``).
        self.counters: Counter[str] = Counter()
        #: Called (on the Trio thread) after going down and after coming back;
        #: an exception it raises is logged and ignored.
        self.on_change: Callable[[UpstreamStatistics], None] | None = None

    def circuit_open(self) -> bool:
        """True while calls must fail at once (down and still backing off)."""
        return self.state == "down" and trio.current_time() < self._open_until

    def retry_in(self) -> float:
        if self.state != "down":
            return 0.0
        return max(0.0, self._open_until - trio.current_time())

    def record_success(self) -> None:
        self.calls += 1
        if self.state != "up":
            if self.state == "down":
                log.info(
                    "upstream %s (%s) is reachable again after %.0f s; using it again",
                    self.name,
                    self.address,
                    time.time() - self._down_since,
                )
            was_down = self.state == "down"
            self.state = "up"
            self._backoff_s = self.base_backoff_s
            self._down_since = 0.0
            if was_down:
                self._changed()

    def record_failure(self, reason: str) -> None:
        self.calls += 1
        self.failed_calls += 1
        self._last_error = reason
        if self.state != "down":
            self.transitions_down += 1
            self._down_since = time.time()
            self._backoff_s = self.base_backoff_s
            log.warning(
                "upstream %s (%s) is unreachable (%s); continuing local-only, next try in %.1f s",
                self.name,
                self.address,
                reason,
                self._backoff_s,
            )
            self.state = "down"
            self._open_until = trio.current_time() + self._backoff_s
            self._changed()
            return
        self._backoff_s = min(self.max_backoff_s, self._backoff_s * 2)
        self._open_until = trio.current_time() + self._backoff_s

    def _changed(self) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(self.statistics())
        except Exception:
            log.exception("upstream %s: on_change hook failed", self.name)

    def statistics(self) -> UpstreamStatistics:
        # Computed without trio.current_time so it works from any thread.
        return UpstreamStatistics(
            name=self.name,
            address=self.address,
            state=self.state,
            healthy=self.state != "down",
            calls=self.calls,
            failed_calls=self.failed_calls,
            retries=self.retries,
            transitions_down=self.transitions_down,
            last_error=self._last_error,
            counters=dict(self.counters),
        )
