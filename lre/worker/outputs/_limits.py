"""The bounds one action's trees and outputs must keep (``limits`` in a
local worker's config).

``ActionLimits`` holds the resolved numbers; every refusal names the limit
by its config key, so a user who really needs more knows what to raise:

- a tree over ``max_tree_depth``, ``max_tree_entries`` or
  ``max_tree_directories`` is refused with ``InvalidArgument`` before any of
  it is staged (input) or read further (output);
- outputs (with stdout and stderr) over ``max_output_bytes`` in total, as
  judged from each file's size and allocated blocks before it is read, are
  refused with ``ResourceExhausted``.
"""

from __future__ import annotations

from dataclasses import dataclass

from lre.cas import TreeExtent
from lre.config import ActionLimitsSpec, auto_max_output_bytes
from lre.errors import InvalidArgument, ResourceExhausted

_KEY = "workers[].local.limits"


@dataclass(frozen=True, slots=True)
class ActionLimits:
    max_tree_depth: int = 256
    max_tree_entries: int = 2_097_152
    max_tree_directories: int = 131_072
    max_output_bytes: int = 16 << 30

    @classmethod
    def of(cls, spec: ActionLimitsSpec, cas_max_bytes: int | None) -> ActionLimits:
        """The limits ``spec`` gives, "auto" worked out from the CAS bound."""
        if spec.max_output_bytes != "auto":
            output = int(spec.max_output_bytes)
        else:  # a spec not resolved by lre.config.resolve (tests, embedders)
            output = auto_max_output_bytes(cas_max_bytes)
        return cls(
            max_tree_depth=spec.max_tree_depth,
            max_tree_entries=spec.max_tree_entries,
            max_tree_directories=spec.max_tree_directories,
            max_output_bytes=max(1, output),
        )

    @property
    def tree_cap(self) -> int:
        """The largest figure a tree check needs to tell apart."""
        return max(self.max_tree_depth, self.max_tree_entries, self.max_tree_directories)

    def check_extent(self, extent: TreeExtent, what: str) -> None:
        """Raise ``InvalidArgument`` naming ``what`` and the first limit
        ``extent`` is over."""
        for figure, limit, key, noun in (
            (extent.depth, self.max_tree_depth, "max_tree_depth", "levels deep"),
            (extent.directories, self.max_tree_directories, "max_tree_directories", "directories"),
            (extent.entries, self.max_tree_entries, "max_tree_entries", "entries"),
        ):
            if figure > limit:
                raise tree_over_limit(what, limit, key, noun)

    def output_over_limit(
        self, what: str, size: int, allocated: int, total: int
    ) -> ResourceExhausted:
        """The error for ``what`` (``size`` bytes, ``allocated`` on disk)
        taking the action's outputs to ``total`` bytes, over ``max_output_bytes``."""
        return ResourceExhausted(
            f"output '{what}' is {size} bytes ({allocated} allocated); the action's outputs "
            f"would reach {total} bytes, over the limit of {self.max_output_bytes} bytes "
            f"({_KEY}.max_output_bytes); it was not read"
        )


def tree_over_limit(what: str, limit: int, key: str, noun: str) -> InvalidArgument:
    """The error for a tree over one of the tree limits."""
    return InvalidArgument(
        f"{what} is more than {limit} {noun}, over the limit {_KEY}.{key} ({limit})"
    )
