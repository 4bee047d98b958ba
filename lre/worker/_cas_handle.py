"""``CasHandle``: the CAS as an action runner uses it, in one object.

The runner reads inputs from and writes outputs to ``store``. A filesystem
store adds three things, each optional: ``link_source`` (its
``path_for_link``: inputs hardlinked instead of copied; with ``link_now``,
its ``stored_path_for_link``, asked first), ``adopt`` (its
``adopt_file``: outputs moved into the CAS) and ``discard`` (its ``discard``:
a linked input an action altered is withdrawn). ``pin`` keeps the blobs of
an input tree from eviction while they are staged; it is the ``pin`` the
store names in its ``capabilities()`` (none for a store that cannot pin),
taken once by ``CasHandle.of``, never per action.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from lre.cas import BlobStore, Pin
from lre.digest import Digest
from lre.worker.inputs import LinkNow, LinkSource
from lre.worker.outputs import Adopter

__all__ = ["CasHandle", "Discarder", "Pinner"]

#: ``discard(digest, executable)`` withdraws a blob whose hardlinked file an
#: action altered (a filesystem store's ``discard``).
Discarder = Callable[[Digest, bool], Awaitable[object]]
#: ``pin(digests)`` holds ``digests`` in the store until the pin is released.
Pinner = Callable[[Sequence[Digest]], Pin]


@dataclass(frozen=True, slots=True)
class CasHandle:
    """The store and what its filesystem store adds (see the module docstring)."""

    store: BlobStore
    link_source: LinkSource | None = None
    adopt: Adopter | None = None
    discard: Discarder | None = None
    pin: Pinner | None = None
    link_now: LinkNow | None = None

    @classmethod
    def of(
        cls,
        store: BlobStore,
        *,
        link_source: LinkSource | None = None,
        adopt: Adopter | None = None,
        discard: Discarder | None = None,
        link_now: LinkNow | None = None,
    ) -> CasHandle:
        """The handle of ``store``, with its ``pin`` when it has one."""
        pin = store.capabilities().pin
        return cls(
            store, link_source=link_source, adopt=adopt, discard=discard, pin=pin, link_now=link_now
        )
