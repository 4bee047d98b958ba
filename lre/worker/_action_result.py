"""The record phase's pieces: the ``ActionResult`` of a finished action and
whether it goes to the action cache.

``action_result`` never fails; ``cache_result`` logs a cache that refuses
the result and goes on (the action's outcome does not depend on it).
"""

from __future__ import annotations

import logging
from typing import Protocol

from lre.config import LocalWorkerSpec
from lre.digest import Digest
from lre.errors import LreError
from lre.proto import re_pb2
from lre.scheduler import Lease
from lre.worker.outputs import FoundFile, FoundOutputs
from lre.worker.process import ProcessOutcome

__all__ = ["INLINE_LIMIT", "ActionResultWriter", "action_result", "cache_result"]

log = logging.getLogger(__name__)

#: Largest stdout/stderr/output file inlined into a result on request.
INLINE_LIMIT = 1 << 20


class ActionResultWriter(Protocol):
    """Where results are cached (``lre.cas.ActionResultCache``).

    ``put_result`` raises ``LreError`` subclasses (missing blobs, full).
    """

    async def put_result(self, action_digest: Digest, result: re_pb2.ActionResult) -> object: ...


def _inline_files(lease: Lease, found: FoundOutputs) -> set[str]:
    wanted = set(lease.inline_output_files)
    return {
        name
        for name, item in found.files
        if name in wanted and item.data is not None and len(item.data) <= INLINE_LIMIT
    }


def action_result(
    lease: Lease,
    found: FoundOutputs,
    logs: list[FoundFile],
    process: ProcessOutcome,
    *,
    max_inline_bytes: int,
) -> re_pb2.ActionResult:
    """The result of ``process``: its exit code, outputs and logs (inlined
    where ``lease`` asked and they fit, logs also up to ``max_inline_bytes``)."""
    inline = _inline_files(lease, found)
    result = re_pb2.ActionResult(exit_code=process.exit_code)
    for name, item in found.files:
        output = result.output_files.add(
            path=name, digest=item.digest.to_proto(), is_executable=item.executable
        )
        if name in inline and item.data is not None:
            output.contents = item.data
    for name, tree_digest, root_digest in found.directories:
        result.output_directories.add(
            path=name,
            tree_digest=tree_digest.to_proto(),
            is_topologically_sorted=True,
            root_directory_digest=root_digest.to_proto(),
        )
    for name, target, kind in found.symlinks:
        result.output_symlinks.add(path=name, target=target)
        legacy = (
            result.output_directory_symlinks if kind == "directory" else result.output_file_symlinks
        )
        legacy.add(path=name, target=target)
    stdout, stderr = logs
    result.stdout_digest.CopyFrom(stdout.digest.to_proto())
    result.stderr_digest.CopyFrom(stderr.digest.to_proto())
    for item, asked, field_name in (
        (stdout, lease.inline_stdout, "stdout_raw"),
        (stderr, lease.inline_stderr, "stderr_raw"),
    ):
        size = item.digest.size_bytes
        if (
            item.data is not None
            and size
            and ((asked and size <= INLINE_LIMIT) or size <= max_inline_bytes)
        ):
            setattr(result, field_name, item.data)
    return result


async def cache_result(
    cache: ActionResultWriter | None,
    spec: LocalWorkerSpec,
    lease: Lease,
    result: re_pb2.ActionResult,
    error: LreError | None,
) -> None:
    """Write ``result`` to ``cache`` when the worker's upload policy, the
    lease and the outcome allow (never after an error, such as a timeout)."""
    strategy = spec.upload_action_result.upload_ac_results_strategy
    if cache is None or lease.do_not_cache or strategy == "never":
        return
    if error is not None:
        return
    if strategy == "success_only" and result.exit_code != 0:
        return
    try:
        await cache.put_result(lease.action_key.action_digest, result)
    except LreError:
        log.exception("worker %s: could not cache result of %s", spec.name, lease.operation_name)
