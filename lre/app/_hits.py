"""``ClientHits``: action-cache hits as the client sees them, kept across restarts.

Bazel and Buck2 ask GetActionResult before every Execute, so most hits a
client gets are GetActionResult answers (an OK reply: the result and all
its blobs are there), not Execute answers; an Execute still finds a result
now and then (lre's scheduler looks before running). A miss is an action
lre ran. The three counts since the last ``lre stats --zero`` are the
totals saved in ``hits.json`` in the state directory plus what this run
counted; ``save`` writes them (every minute and at stop), ``zero`` starts
over (sccache's habit).

Failure: an unreadable or malformed ``hits.json`` counts as zero (logged
once); a failed save is logged and retried at the next one.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import trio

from lre.config import HITS_FILE

__all__ = ["ClientHits", "HitCounts"]

log = logging.getLogger("lre.app")


@dataclass(frozen=True, slots=True)
class HitCounts:
    """Hits by the call that found them, misses, and since when (epoch s)."""

    get_action_result_hits: int = 0
    execute_hits: int = 0
    misses: int = 0
    since: float = 0.0

    def __add__(self, other: HitCounts) -> HitCounts:
        return HitCounts(
            self.get_action_result_hits + other.get_action_result_hits,
            self.execute_hits + other.execute_hits,
            self.misses + other.misses,
            self.since,
        )

    def __sub__(self, other: HitCounts) -> HitCounts:
        return HitCounts(
            max(0, self.get_action_result_hits - other.get_action_result_hits),
            max(0, self.execute_hits - other.execute_hits),
            max(0, self.misses - other.misses),
            self.since,
        )


def _read(path: str) -> HitCounts | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return HitCounts(
            int(data["get_action_result_hits"]),
            int(data["execute_hits"]),
            int(data["misses"]),
            float(data["since"]),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("ignoring %s (counting hits from zero): %s", path, error)
        return None


def _write(path: str, counts: HitCounts) -> None:
    temp = path + ".tmp"
    with open(temp, "w", encoding="utf-8") as f:
        json.dump(
            {
                "get_action_result_hits": counts.get_action_result_hits,
                "execute_hits": counts.execute_hits,
                "misses": counts.misses,
                "since": counts.since,
            },
            f,
        )
    os.replace(temp, path)


class ClientHits:
    """Saved totals plus this run's live counts (``live()``: totals since start)."""

    def __init__(self, state_dir: str, live: Callable[[], HitCounts]) -> None:
        self.path = os.path.join(state_dir, HITS_FILE)
        self._live = live
        saved = _read(self.path)
        self._saved = saved if saved is not None else HitCounts(since=time.time())
        #: Live counts already folded into ``_saved`` (or dropped by ``zero``).
        self._offset = HitCounts()

    def totals(self) -> HitCounts:
        return self._saved + (self._live() - self._offset)

    def zero(self) -> None:
        """Start over now; the file says so at once."""
        self._offset = self._live()
        self._saved = HitCounts(since=time.time())
        self.save()

    def save(self) -> None:
        try:
            _write(self.path, self.totals())
        except OSError as error:
            log.warning("saving the hit counts to %s failed: %s", self.path, error)

    async def run(
        self,
        interval_s: float = 60.0,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Save every ``interval_s`` until cancelled, and once more then."""
        task_status.started()
        try:
            while True:
                await trio.sleep(interval_s)
                self.save()
        finally:
            self.save()
