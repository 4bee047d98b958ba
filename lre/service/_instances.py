"""Which backends serve which instance name.

One servicer object serves every instance: each request's ``instance_name``
is looked up here. Names may be empty or contain '/'; the name ``"*"``
matches every name not listed explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lre.cas import ActionResultCache, BlobStore
from lre.errors import InvalidArgument
from lre.scheduler import ActionScheduler

WILDCARD = "*"


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceBackends:
    """The live objects behind one instance name.

    ``scheduler`` serves the Execution and Operations services; ``None``
    disables execution and ``exec_enabled`` in GetCapabilities.
    ``action_cache`` ``None`` makes the ActionCache service answer NOT_FOUND
    for reads and refuse writes; its CAS should be ``cas``.
    """

    cas: BlobStore
    action_cache: ActionResultCache | None = None
    scheduler: ActionScheduler | None = None
    ac_read_only: bool = False


class Instances:
    """Resolve request instance names to ``InstanceBackends``."""

    def __init__(self, backends: Mapping[str, InstanceBackends]) -> None:
        self._exact = {name: b for name, b in backends.items() if name != WILDCARD}
        self._wildcard = backends.get(WILDCARD)

    @property
    def names(self) -> tuple[str, ...]:
        """The configured names ("*" included when present)."""
        names = tuple(sorted(self._exact))
        return (*names, WILDCARD) if self._wildcard is not None else names

    def resolve(self, instance_name: str) -> InstanceBackends:
        """The backends for ``instance_name``.

        Raises ``InvalidArgument`` naming the instance (and the served ones)
        when no entry and no wildcard matches.
        """
        found = self._exact.get(instance_name)
        if found is not None:
            return found
        if self._wildcard is not None:
            return self._wildcard
        served = ", ".join(repr(n) for n in self.names)
        raise InvalidArgument(
            f"instance_name: {instance_name!r} is not served here (served: {served})"
        )
