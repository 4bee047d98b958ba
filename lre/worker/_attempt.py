"""One attempt of a leased action on a worker, and what happens to it meanwhile.

``ActionRunner`` makes an ``Attempt`` when it takes a lease and drops it
when the attempt has ended; the runner's phases fill it in (the process
group while it runs, the frozen time, a kill, a refused fork, whether its
directory may be recycled or must be kept) and its end reads it back.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from lre.scheduler import Lease
from lre.worker._metadata import Timeline
from lre.worker.containment import Containment
from lre.worker.directories import ActionDirectory
from lre.worker.usage import ActionUsage, ProcessTreeSampler


@dataclass(frozen=True, slots=True)
class MemoryKill:
    """Why the memory control killed an attempt's action."""

    #: The sampler's figures of the action when it was killed (None: no sampler).
    usage: ActionUsage | None
    reason: str
    #: Not retried (the hard ceiling passed).
    final: bool


@dataclass(slots=True, eq=False)
class Attempt:
    """One leased action's run on this worker, from its directory taken to released."""

    lease: Lease
    action_dir: ActionDirectory
    timeline: Timeline
    #: The process group of the action while it runs (None: not running).
    group: int | None = None
    #: Set when the memory control killed it.
    killed: MemoryKill | None = None
    #: Seconds the action spent frozen (``MemoryControl``), once it ended.
    frozen_s: float = 0.0
    #: A fork of the action was refused by ``max_processes``.
    process_limited: bool = False
    #: False when something the action started may still run (see
    #: ``ProcessOutcome.ended_alone``): the directory is then removed.
    reusable: bool = True
    #: The directory is kept for debugging (never released).
    kept: bool = False
    #: The held mount namespace of the ended action's view, closed with the
    #: directory's release (``ActionDirectories``).
    view_held: int | None = None

    @property
    def lease_id(self) -> str:
        return self.lease.lease_id

    def kill(
        self, reason: str, final: bool, containment: Containment, sampler: ProcessTreeSampler | None
    ) -> None:
        """Kill the action's whole tree now (frozen or not), remembered as a
        ``MemoryKill`` (``final``: not retried). Does nothing when the action
        is not running; a process already gone is skipped."""
        if self.group is None:
            return
        usage = sampler.snapshot(self.lease_id) if sampler is not None else None
        self.killed = MemoryKill(usage, reason, final)
        containment.signal_action(self.group, signal.SIGKILL)
        for pid in sampler.members(self.lease_id) if sampler is not None else ():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
