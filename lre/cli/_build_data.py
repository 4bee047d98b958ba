"""One build's records from the history, as ``lre trace`` and ``lre report`` use them.

``load_build(state_dir, wanted)`` reads the history files directly (lre may
be down; a running lre writes what it holds first, ``_history_read``),
picks the build (``last``, an id or a unique prefix of one) and
returns its actions, the host samples taken while it ran, and its summary.
Raises ``LookupError`` with a message for people when there is no such build.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lre.cli._history_read import read_state_history
from lre.snapshot import (
    ActionRecord,
    BuildSummary,
    HostSample,
    Source,
    find_build,
)

__all__ = ["BuildData", "Slotted", "load_build", "slot_actions"]


@dataclass(frozen=True, slots=True)
class BuildData:
    summary: BuildSummary
    actions: tuple[ActionRecord, ...]
    samples: tuple[HostSample, ...]

    @property
    def origin(self) -> float:
        """Time zero of the timeline: the build's first request, or an earlier
        phase stamp (the file keeps ``submitted_at`` to 0.1 ms and the stamps
        to 1 us, so a first ``queued`` stamp may lie up to 50 us before it)."""
        stamps = (v for a in self.actions for v in a.stamps.values() if v)
        return min(self.summary.started_at, min(stamps, default=self.summary.started_at))


def load_build(state_dir: Path, wanted: str) -> BuildData:
    read = read_state_history(state_dir)
    summary = find_build(read.builds(), wanted)
    mine = tuple(a for a in read.actions if a.invocation == summary.invocation)
    during = tuple(
        s for s in read.samples if summary.started_at - 1.0 <= s.at <= summary.ended_at + 1.0
    )
    return BuildData(summary, mine, during)


@dataclass(frozen=True, slots=True)
class Slotted:
    """An executed action placed on a running slot (0-based), with the
    wall-clock span it held the slot: ``worker_start`` to ``worker_completed``."""

    record: ActionRecord
    slot: int
    start: float
    end: float


def slot_actions(actions: tuple[ActionRecord, ...]) -> list[Slotted]:
    """Place every executed action that reached a worker on the lowest slot
    free at its start, so no two actions on one slot overlap; the number of
    slots is the most actions that ran at once."""
    spans = []
    for record in actions:
        if record.source is not Source.EXECUTED:
            continue
        start = record.stamps.get("worker_start", 0.0)
        end = record.stamps.get("worker_completed", 0.0) or record.at
        if start:
            spans.append((start, max(start, end), record))
    spans.sort(key=lambda s: (s[0], s[1]))
    free_at: list[float] = []
    placed = []
    for start, end, record in spans:
        for slot, busy_until in enumerate(free_at):
            if busy_until <= start:
                free_at[slot] = end
                break
        else:
            slot = len(free_at)
            free_at.append(end)
        placed.append(Slotted(record, slot, start, end))
    return placed
