"""What an operation reserves: the first size, the memory ladder after kills,
and what each run teaches the advisor.

- First size: what the client asked (its ``minimum`` platform properties,
  raised to its estimates such as ``resources:cpu``, an estimate capped by
  the largest matching worker and the memory budget), raised to the
  advisor's learned reservation or, for a kind never seen, to the cold
  memory default; what is learned is capped by the largest matching worker
  and the memory budget, and never lowers what the client asked. A learned
  ladder step starts the operation higher up.
- After a ``MemoryExceeded`` kill: the next ladder step above both the
  reservation it had and the peak it reached; past the top of the ladder
  the operation reserves a whole idle worker (``exclusive``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from lre.errors import FailedPrecondition, ResourceExhausted
from lre.scheduler._lease import Lease
from lre.scheduler._matching import Requirements
from lre.scheduler._model import (
    Completed,
    MemoryExceeded,
    Outcome,
    Reservation,
    ResourcePolicy,
    WorkerInfo,
)
from lre.scheduler._protocols import ReservationAdvisor
from lre.scheduler._records import OperationState
from lre.scheduler._units import memory_text

log = logging.getLogger("lre.scheduler")


def memory_ceiling(resources: ResourcePolicy, matching: Sequence[WorkerInfo]) -> int:
    """The most memory an action may reserve on any of ``matching``."""
    ceiling = max(w.capacity.memory_bytes for w in matching)
    budget = resources.memory_budget_bytes
    return ceiling if budget is None else min(ceiling, budget)


def size_initial(
    op: OperationState,
    requirements: Requirements,
    matching: Sequence[WorkerInfo],
    resources: ResourcePolicy,
    advisor: ReservationAdvisor | None,
) -> None:
    """Set ``op.reservation`` (and its ladder step) before it is first queued.

    Raises ``FailedPrecondition`` when the client asks for more memory than
    any matching worker or the budget offers. Advisor errors are logged and
    the cold default is used.
    """
    asked = requirements.reservation
    largest_cpu = max(w.capacity.millicpus for w in matching)
    largest_mem = memory_ceiling(resources, matching)
    # What the client asked (its minimum keys, raised to its estimates, an
    # estimate capped at what the largest matching worker has): a floor the
    # learner and the cold default may only raise.
    estimate = requirements.estimate
    floor_cpu = max(asked.millicpus, min(estimate.millicpus, largest_cpu))
    floor_memory = max(asked.memory_bytes, min(estimate.memory_bytes, largest_mem))
    millicpus, memory, step = floor_cpu, floor_memory, 0
    learned = None
    if advisor is not None:
        try:
            learned = advisor.lookup(op.kind_key)
        except Exception:
            log.exception("reservation advisor lookup failed for %s", op.kind_key)
    if learned is not None:
        millicpus = max(millicpus, learned[0])
        memory = max(memory, learned[1])
        step = max(0, learned[2])
    else:
        memory = max(memory, resources.cold_memory_bytes)
    if asked.memory_bytes > largest_mem:
        raise FailedPrecondition(
            f"action {op.key.action_digest}: platform property memory_kb="
            f"{asked.memory_bytes // 1024} is more than the memory budget "
            f"({memory_text(largest_mem)})"
        )
    op.reservation = Reservation(
        max(floor_cpu, min(millicpus, largest_cpu)),
        max(floor_memory, min(memory, largest_mem)),
        asked.extra,
    )
    if step > 0:
        move_to_step(op, step, matching, resources)


def move_to_step(
    op: OperationState, step: int, matching: Sequence[WorkerInfo], resources: ResourcePolicy
) -> None:
    """Reserve ladder step ``step`` (1-based), or the whole worker past the top."""
    ladder = resources.ladder
    ceiling = memory_ceiling(resources, matching)
    if step <= len(ladder) and ladder[step - 1] <= ceiling:
        op.ladder_step = step
        memory = max(op.reservation.memory_bytes, ladder[step - 1])
        op.reservation = Reservation(op.reservation.millicpus, memory, op.reservation.extra)
    else:
        op.ladder_step = len(ladder) + 1
        op.exclusive = True


def escalate(
    op: OperationState,
    lease: Lease,
    outcome: MemoryExceeded,
    matching: Sequence[WorkerInfo],
    resources: ResourcePolicy,
) -> ResourceExhausted | None:
    """Record a ladder kill of ``lease`` and size ``op`` one step up.

    Returns the error to end the operation with when it has been killed
    ``max_steps`` times (naming the peak and every step tried), else None
    (requeue it). The kill does not count as an attempt.
    """
    op.attempt -= 1  # not a retry: the next run keeps this attempt number
    op.kills += 1
    tried = "whole worker" if lease.exclusive else memory_text(lease.reservation.memory_bytes)
    op.steps_tried = (*op.steps_tried, tried)
    why = f" ({outcome.reason})" if outcome.reason else ""
    op.kill_notes = (
        *op.kill_notes,
        f"killed at {memory_text(outcome.peak_rss_bytes)} RSS reserving {tried}{why}",
    )
    if outcome.final or op.kills >= resources.max_steps:
        return ResourceExhausted(
            f"action {op.key.action_digest} was killed {op.kills} time(s) while memory "
            f"was short or over the hard ceiling{why}; peak RSS "
            f"{memory_text(outcome.peak_rss_bytes)}; steps tried: " + ", ".join(op.steps_tried)
        )
    if not op.exclusive:
        floor = max(lease.reservation.memory_bytes, outcome.peak_rss_bytes)
        ladder = resources.ladder
        step = next(
            (i for i, amount in enumerate(ladder, 1) if i > op.ladder_step and amount > floor),
            len(ladder) + 1,
        )
        if matching:
            move_to_step(op, step, matching, resources)
        else:
            op.ladder_step, op.exclusive = len(ladder) + 1, True
    return None


#: Runs shorter than this teach the learner nothing about CPU (see ``record_usage``).
MIN_CPU_SAMPLE_WALL_S = 1.0


def record_usage(advisor: ReservationAdvisor, lease: Lease, outcome: Outcome) -> None:
    """Tell ``advisor`` what the run of ``lease`` used (peak RSS, average CPU),
    when the outcome says; advisor errors are logged and ignored."""
    usage = outcome.usage if isinstance(outcome, Completed | MemoryExceeded) else None
    if isinstance(outcome, MemoryExceeded):
        peak = max(outcome.peak_rss_bytes, usage.peak_rss_bytes if usage else 0)
        average = usage.average_millicpus if usage else 0
    elif usage is not None:
        peak, average = usage.peak_rss_bytes, usage.average_millicpus
    else:
        return
    if usage is not None and usage.wall_seconds < MIN_CPU_SAMPLE_WALL_S:
        # CPU / wall of a run this short is mostly start-up and /proc tick
        # rounding (10 ms per process); 0 means "no CPU figure", so the kind
        # keeps the CPUs its client asks for.
        average = 0
    # A killed run sends the kind's next run one step up; a run that ended
    # brings it back to step 0, where its peak (x the learner's factor) is
    # reserved anyway.
    step = lease.ladder_step + 1 if isinstance(outcome, MemoryExceeded) else 0
    try:
        advisor.record(lease.kind_key, peak, average, step)
    except Exception:
        log.exception("reservation advisor record failed for %s", lease.kind_key)
