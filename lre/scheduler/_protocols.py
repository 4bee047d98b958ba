"""Small interfaces the scheduler uses, so it runs without their implementations."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from lre.digest import Digest
from lre.proto import re_pb2


@runtime_checkable
class ActionResultReader(Protocol):
    """Reads the action cache. ``get_result`` returns None on a miss; errors it
    raises end the operation with that error."""

    async def get_result(self, digest: Digest) -> re_pb2.ActionResult | None: ...


@runtime_checkable
class ReservationAdvisor(Protocol):
    """Learned reservations per kind of action (``Lease.kind_key``).

    ``lookup`` returns ``(millicpus, memory_bytes, ladder_step)`` already
    scaled (percentile x factor) or None for a kind never seen. ``record`` is
    called once per finished run (also for ladder kills). Both are synchronous
    and must be cheap (the scheduler calls them on the Trio thread); errors
    they raise are logged and ignored.
    """

    def lookup(self, key: str) -> tuple[int, int, int] | None: ...

    def record(
        self, key: str, peak_rss_bytes: int, average_millicpus: int, ladder_step: int
    ) -> None: ...
