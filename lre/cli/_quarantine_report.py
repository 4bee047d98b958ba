"""What the workers' quarantines hold, for ``lre doctor`` and ``lre cache``.

Leftovers lre could not delete are moved into ``{work_directory}/{worker}/
.quarantine/`` (``lre.worker.quarantined``); these read that directory only,
so they work whether or not lre is running.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lre.cli._checks import Check
from lre.config import Config

if TYPE_CHECKING:  # the worker package pulls in trio and the stores
    from lre.worker import QuarantinedEntry

FIX = (
    "see 'Quarantined leftovers' in docs/troubleshooting.md: undo what blocks removal "
    "(chattr -i, umount, chown), then restart lre or wait for its next retry"
)


def quarantine_entries(config: Config) -> list[QuarantinedEntry]:
    """Every quarantined entry of the configuration's local workers."""
    from lre.worker import quarantined  # only when asked: `lre --help` stays light

    entries: list[QuarantinedEntry] = []
    for worker in config.workers:
        if worker.local is not None:
            entries += quarantined(Path(worker.local.work_directory) / worker.local.name)
    return entries


def quarantine_check(config: Config) -> Check:
    """OK when no quarantine holds anything, else WARN listing each entry."""
    entries = quarantine_entries(config)
    if not entries:
        return Check("quarantine", "OK", "no leftovers lre could not delete")
    listed = "; ".join(f"{entry.path} ({entry.reason})" for entry in entries)
    return Check(
        "quarantine",
        "WARN",
        f"{len(entries)} leftover(s) lre could not delete, moved aside: {listed}",
        FIX,
    )


def quarantine_lines(config: Config) -> list[str]:
    """The lines ``lre cache`` prints about quarantined leftovers (none when empty)."""
    entries = quarantine_entries(config)
    if not entries:
        return []
    lines = [f"  quarantine: {len(entries)} leftover(s) lre could not delete ({FIX}):"]
    lines += [f"    {entry.path}: {entry.reason}" for entry in entries]
    return lines
