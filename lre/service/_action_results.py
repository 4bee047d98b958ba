"""GetActionResult / UpdateActionResult on an instance's backends (Trio side).

Completeness (every referenced blob still in the CAS) is checked by
``lre.cas.ActionResultCache``: an incomplete result is NOT_FOUND here, so
Bazel and Buck2 re-run the action instead of failing later on a missing
output.
"""

from __future__ import annotations

from lre.cas import BlobStore, read_bytes
from lre.digest import Digest
from lre.errors import CacheMiss, PermissionDenied
from lre.proto import re_pb2
from lre.service._digest_functions import check_digest_function
from lre.service._instances import InstanceBackends

#: Bytes of stdout, stderr and output files inlined into one GetActionResult.
DEFAULT_MAX_INLINE_BYTES = 1 << 20


async def _inline(
    store: BlobStore,
    result: re_pb2.ActionResult,
    request: re_pb2.GetActionResultRequest,
    budget: int,
) -> None:
    """Fill ``*_raw`` / ``contents`` as requested while ``budget`` bytes last."""
    if request.inline_stdout and result.HasField("stdout_digest") and not result.stdout_raw:
        size = result.stdout_digest.size_bytes
        if 0 < size <= budget:
            result.stdout_raw = await read_bytes(store, Digest.from_proto(result.stdout_digest))
            budget -= size
    if request.inline_stderr and result.HasField("stderr_digest") and not result.stderr_raw:
        size = result.stderr_digest.size_bytes
        if 0 < size <= budget:
            result.stderr_raw = await read_bytes(store, Digest.from_proto(result.stderr_digest))
            budget -= size
    wanted = set(request.inline_output_files)
    if not wanted:
        return
    for output in result.output_files:
        if output.path in wanted and not output.contents:
            size = output.digest.size_bytes
            if 0 < size <= budget:
                output.contents = await read_bytes(store, Digest.from_proto(output.digest))
                budget -= size


async def get_action_result(
    backends: InstanceBackends,
    request: re_pb2.GetActionResultRequest,
    max_inline_bytes: int = DEFAULT_MAX_INLINE_BYTES,
) -> re_pb2.ActionResult:
    """The cached, complete result with the requested inlining.

    Raises ``InvalidArgument`` for a malformed ``action_digest`` and
    ``NotFound`` when there is no complete result (or no action cache).
    """
    action = _requested_action(request)
    cache = backends.action_cache
    result = await cache.get_result(action) if cache is not None else None
    if result is None:
        raise CacheMiss(f"action_digest: no complete cached result for {action}")
    await _inline(backends.cas, result, request, max_inline_bytes)
    return result


def check_known_miss(backends: InstanceBackends, request: re_pb2.GetActionResultRequest) -> None:
    """(any thread) Raise what ``get_action_result`` would when the answer is
    known without I/O: ``InvalidArgument`` for a malformed digest,
    ``CacheMiss`` when the cache knows from memory it has no entry. Returns
    when the lookup must really be made."""
    action = _requested_action(request)
    cache = backends.action_cache
    if cache is None or cache.known_absent(action):
        raise CacheMiss(f"action_digest: no complete cached result for {action}")


def _requested_action(request: re_pb2.GetActionResultRequest) -> Digest:
    check_digest_function(request.digest_function, request.action_digest.hash)
    return Digest.from_proto(request.action_digest, field="action_digest")


async def update_action_result(
    backends: InstanceBackends, request: re_pb2.UpdateActionResultRequest
) -> re_pb2.ActionResult:
    """Store the result after checking its digests and that its blobs exist.

    Raises ``PermissionDenied`` for a read-only or absent action cache,
    ``InvalidArgument`` naming a malformed digest, and ``MissingBlobs``
    (FAILED_PRECONDITION) listing referenced blobs not in the CAS.
    """
    check_digest_function(request.digest_function, request.action_digest.hash)
    action = Digest.from_proto(request.action_digest, field="action_digest")
    cache = backends.action_cache
    if cache is None or backends.ac_read_only:
        raise PermissionDenied(
            f"instance_name: {request.instance_name!r} does not accept action cache updates"
        )
    return await cache.put_result(action, request.action_result)
