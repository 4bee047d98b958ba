"""``LookupHits``: every ``GetActionResult`` hit goes to the history.

A client that finds an action in the cache never calls Execute, so the
scheduler never sees it; a listener's one interceptor (``_call_checks``, given
``ServerOptions(lookup_hits=LookupHits(hook))``) calls this after each
successful ``GetActionResult``, in the wrapper it already puts around the call
(no other call pays anything). It records the hit, with the
``RequestMetadata`` the client sent (tool invocation id, target, mnemonic), as
an ``lre.snapshot.ActionRecord`` of source ``lookup_hit``. It runs on the gRPC
thread, so ``hook`` must be thread-safe; an exception it raises is logged and
ignored (the client still gets its result).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from lre.service._metadata import request_metadata_from
from lre.snapshot import ActionRecord, Source

__all__ = ["LookupHits"]

log = logging.getLogger(__name__)


class LookupHits:
    """See the module docstring; ``hook`` receives each hit's record."""

    def __init__(self, hook: Callable[[ActionRecord], None]) -> None:
        self._hook = hook

    def __call__(self, request: Any, context: Any, result: Any) -> None:
        try:
            metadata = request_metadata_from(context.invocation_metadata())
            now = time.time()
            self._hook(
                ActionRecord(
                    at=now,
                    source=Source.LOOKUP_HIT,
                    invocation=metadata.tool_invocation_id,
                    repository=metadata.repository,
                    tool=f"{metadata.tool_name} {metadata.tool_version}".strip(),
                    instance=str(request.instance_name),
                    target=metadata.target_id,
                    mnemonic=metadata.action_mnemonic,
                    action=str(request.action_digest.hash),
                    exit_code=int(result.exit_code),
                    submitted_at=now,
                )
            )
        except Exception:
            log.exception("recording a GetActionResult hit failed")
