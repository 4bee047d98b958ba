"""Where a scheduler name leads: the one walk over ``schedulers[]`` references.

A scheduler is ``simple`` (a queue of its own), a ``property_modifier`` (adds
platform properties, then hands over to another scheduler) or ``forward``
(sends to an upstream, falls back to its ``local`` scheduler). Every name
therefore leads, through modifiers and forwards, to one simple scheduler;
``scheduler_chain`` follows the references once and says what it met.
"""

from __future__ import annotations

from dataclasses import dataclass

from lre.app._build_error import AppBuildError
from lre.config import (
    Config,
    ForwardSchedulerSpec,
    PropertyModification,
    SchedulerSpec,
    SimpleSchedulerSpec,
)


@dataclass(frozen=True, slots=True)
class SchedulerChain:
    """What one scheduler name leads to."""

    #: The simple scheduler at the end of the chain, and its name.
    simple: SimpleSchedulerSpec
    simple_name: str
    #: The property modifications met on the way, in order.
    modifications: tuple[PropertyModification, ...]
    #: The first forward scheduler met on the way (name, spec), if any.
    forward: tuple[str, ForwardSchedulerSpec] | None


def scheduler_chain(config: Config, name: str) -> SchedulerChain:
    """Follow scheduler ``name`` through modifiers and forwards to a simple one.

    Raises ``AppBuildError`` naming the scheduler when one gives no kind or
    the references loop; ``KeyError`` for a name no scheduler has (config
    validation rejects that first).
    """
    specs: dict[str, SchedulerSpec] = {s.name: s for s in config.schedulers}
    modifications: list[PropertyModification] = []
    forward: tuple[str, ForwardSchedulerSpec] | None = None
    seen: set[str] = set()
    while name not in seen:
        seen.add(name)
        spec = specs[name]
        if spec.simple is not None:
            return SchedulerChain(spec.simple, name, tuple(modifications), forward)
        if spec.property_modifier is not None:
            modifications.extend(spec.property_modifier.modifications)
            name = spec.property_modifier.scheduler
            continue
        if spec.forward is not None:
            if forward is None:
                forward = (name, spec.forward)
            name = spec.forward.local
            continue
        raise AppBuildError(f"schedulers[{name}]: no scheduler kind given")
    raise AppBuildError(f"schedulers[{name}]: property_modifier chain loops")
