"""The matcher: pure functions from an action's platform to what it needs, and
whether a worker can ever, or right now, give it that.

Key types (``supported_platform_properties``), as in NativeLink:

- ``exact``: the worker must offer the value asked, compared without regard
  to case (``OSFamily=Linux``, as Bazel users write it, matches a worker
  offering ``linux``, as most clusters spell it; ``value_matches``);
- ``minimum``: numeric; the worker's capacity must be at least the value, and
  the value is reserved on the worker while the action runs; the estimate
  keys (``resources:cpu``, ``resources:memory``, ``EstimatedCPU``,
  ``EstimatedMemory``, ``EstimatedComputeUnits``: ``_units.estimate_of``)
  are a floor under the CPU and memory reserved instead, never a reason to
  refuse (``_sizing`` caps them at what the largest matching worker has);
- ``priority``: the worker must have the key; the value is informational;
- ``ignore``: the key restricts nothing.

A key not listed is refused at once (never queued forever).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from lre.config import PropertyModification
from lre.errors import FailedPrecondition
from lre.proto import re_pb2
from lre.scheduler._model import Reservation, WorkerInfo
from lre.scheduler._units import (
    CPU_PROPERTY,
    ESTIMATE_PROPERTIES,
    MEMORY_PROPERTY,
    amount_from_property,
    bytes_from_memory_kb,
    cpu_count_text,
    estimate_of,
    memory_text,
    millicpus_from_cpu_count,
)

PropertyTypes = Mapping[str, str]

_NO_ESTIMATE = Reservation()


def platform_of(action: re_pb2.Action, command: re_pb2.Command) -> dict[str, str]:
    """The action's platform properties: ``Action.platform`` when it has any,
    else ``Command.platform`` (Buck2 fills only the latter). A name given
    twice keeps its last value."""
    source = action.platform if action.platform.properties else command.platform
    return {prop.name: prop.value for prop in source.properties}


def apply_modifications(
    platform: Mapping[str, str], modifications: Iterable[PropertyModification]
) -> dict[str, str]:
    """Apply ``property_modifier`` rules in order: ``add`` sets a property the
    action lacks, ``remove`` deletes one, ``replace`` sets one unconditionally."""
    result = dict(platform)
    for rule in modifications:
        if rule.add is not None:
            result.setdefault(rule.add.name, rule.add.value)
        elif rule.remove is not None:
            result.pop(rule.remove, None)
        elif rule.replace is not None:
            result[rule.replace.name] = rule.replace.value
    return result


@dataclass(frozen=True, slots=True)
class Requirements:
    """What an action needs from a worker.

    ``exact`` maps keys to the value the worker must offer; ``present`` lists
    ``priority`` keys the worker must merely have; ``reservation`` holds the
    ``minimum`` keys converted to internal units (``_units``); ``estimate``
    the most CPU and memory any estimate key asked for (a floor under the
    reservation, not a requirement a worker must meet)."""

    exact: tuple[tuple[str, str], ...]
    present: tuple[str, ...]
    reservation: Reservation
    estimate: Reservation = _NO_ESTIMATE

    def platform_label(self) -> str:
        """The platform alone, without the sized reservation: ``OSFamily=linux``
        (``any`` when the action asks for nothing in particular)."""
        parts = [f"{k}={v}" for k, v in self.exact]
        parts += list(self.present)
        return ",".join(parts) or "any"

    def label(self) -> str:
        """Short text for statistics: ``OSFamily=linux,cpu=2,mem=1 GiB``."""
        parts = [f"{k}={v}" for k, v in self.exact]
        parts += list(self.present)
        parts.append(f"cpu={cpu_count_text(self.reservation.millicpus)}")
        if self.reservation.memory_bytes:
            parts.append(f"mem={memory_text(self.reservation.memory_bytes)}")
        parts += [f"{k}={v}" for k, v in sorted(self.reservation.extra.items())]
        return ",".join(parts)


def requirements_of(platform: Mapping[str, str], types: PropertyTypes) -> Requirements:
    """Classify ``platform`` by ``types``.

    Raises ``FailedPrecondition`` naming the key, its value and the known
    keys for a key the scheduler does not know, and ``InvalidArgument`` for a
    ``minimum`` value that is not a number.
    """
    exact: list[tuple[str, str]] = []
    present: list[str] = []
    millicpus = 0
    memory = 0
    estimated_cpu = estimated_memory = 0
    extra: dict[str, int] = {}
    for key in sorted(platform):
        value = platform[key]
        kind = types.get(key)
        if kind is None:
            known = ", ".join(sorted(types)) or "none"
            raise FailedPrecondition(
                f"platform property {key}={value!r} is not known to this scheduler "
                f"(known keys: {known}); add it to supported_platform_properties"
            )
        if kind == "exact":
            exact.append((key, value))
        elif kind == "priority":
            present.append(key)
        elif kind == "minimum":
            if key in ESTIMATE_PROPERTIES:
                cpu, mem = estimate_of(key, value)
                estimated_cpu = max(estimated_cpu, cpu)
                estimated_memory = max(estimated_memory, mem)
            elif key == CPU_PROPERTY:
                millicpus = millicpus_from_cpu_count(value)
            elif key == MEMORY_PROPERTY:
                memory = bytes_from_memory_kb(value)
            else:
                extra[key] = amount_from_property(value, field=key)
        # "ignore": nothing
    return Requirements(
        tuple(exact),
        tuple(present),
        Reservation(millicpus, memory, MappingProxyType(extra)),
        Reservation(estimated_cpu, estimated_memory),
    )


def value_matches(value: str, offers: Iterable[str]) -> bool:
    """Whether an ``exact`` value asked is among ``offers``, ignoring case."""
    wanted = value.casefold()
    return any(offer.casefold() == wanted for offer in offers)


def matches_statically(requirements: Requirements, worker: WorkerInfo) -> bool:
    """True when ``worker`` could ever run the action: it offers every exact
    value (``value_matches``) and priority key, and its whole capacity covers
    the reservation."""
    for key, value in requirements.exact:
        if not value_matches(value, worker.properties.get(key, ())):
            return False
    for key in requirements.present:
        if key not in worker.properties and key not in worker.capacity.extra:
            return False
    return requirements.reservation.fits_in(worker.capacity)


def explain_unsatisfiable(requirements: Requirements, workers: Sequence[WorkerInfo]) -> str | None:
    """None when some worker matches statically; else a message naming the
    first requirement that fails, the value asked and what the workers offer."""
    if any(matches_statically(requirements, w) for w in workers):
        return None
    if not workers:
        return "no worker is registered with this scheduler, so the action can never run"
    for key, value in requirements.exact:
        offers = sorted({v for w in workers for v in w.properties.get(key, ())})
        if not value_matches(value, offers):
            shown = ", ".join(repr(v) for v in offers) if offers else "nothing"
            return (
                f"platform property {key}={value!r}: no worker offers it "
                f"(workers offer {key} = {shown})"
            )
    for key in requirements.present:
        if not any(key in w.properties or key in w.capacity.extra for w in workers):
            return f"platform property {key}: no worker has this key"
    asked = requirements.reservation
    if all(asked.millicpus > w.capacity.millicpus for w in workers):
        best = max(w.capacity.millicpus for w in workers)
        return (
            f"platform property {CPU_PROPERTY}={cpu_count_text(asked.millicpus)}: more "
            f"CPUs than any worker has (largest worker: {CPU_PROPERTY}="
            f"{cpu_count_text(best)})"
        )
    if all(asked.memory_bytes > w.capacity.memory_bytes for w in workers):
        best = max(w.capacity.memory_bytes for w in workers)
        return (
            f"platform property {MEMORY_PROPERTY}={asked.memory_bytes // 1024}: more memory "
            f"than any worker has ({memory_text(asked.memory_bytes)} asked, largest "
            f"worker {memory_text(best)} = {MEMORY_PROPERTY}={best // 1024})"
        )
    for key, amount in asked.extra.items():
        if all(amount > w.capacity.extra.get(key, 0) for w in workers):
            best_extra = max(w.capacity.extra.get(key, 0) for w in workers)
            return (
                f"platform property {key}={amount}: more than any worker has "
                f"(largest worker: {key}={best_extra})"
            )
    return (
        "no single worker satisfies all of the action's platform properties together "
        f"({requirements.label()})"
    )
