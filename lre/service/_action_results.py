"""GetActionResult / UpdateActionResult on an instance's backends (Trio side).

A stored result is only served when every blob it references is still in
the CAS (outputs, stdout/stderr, each output directory's Tree blob and the
files listed in it, and root directory blobs); otherwise the answer is
NOT_FOUND, so Bazel and Buck2 re-run the action instead of failing later on
a missing output.
"""

from __future__ import annotations

from lre.cas import BlobStore, missing_digests, read_bytes, read_message
from lre.digest import Digest
from lre.errors import InvalidArgument, MissingBlobs, NotFound, PermissionDenied
from lre.proto import re_pb2
from lre.service._digest_functions import check_digest_function
from lre.service._instances import InstanceBackends

#: Bytes of stdout, stderr and output files inlined into one GetActionResult.
DEFAULT_MAX_INLINE_BYTES = 1 << 20


def _parse(message: re_pb2.Digest, field: str) -> Digest:
    return Digest.from_proto(message, field=field)


async def referenced_digests(store: BlobStore, result: re_pb2.ActionResult) -> list[Digest]:
    """Every blob ``result`` needs, including the files inside its Tree blobs.

    Raises ``InvalidArgument`` naming the field of a malformed digest. A Tree
    blob that is absent is returned as missing (its files are not listed).
    """
    digests: list[Digest] = []
    for i, f in enumerate(result.output_files):
        digests.append(_parse(f.digest, f"action_result.output_files[{i}].digest"))
    if result.HasField("stdout_digest"):
        digests.append(_parse(result.stdout_digest, "action_result.stdout_digest"))
    if result.HasField("stderr_digest"):
        digests.append(_parse(result.stderr_digest, "action_result.stderr_digest"))
    trees: list[Digest] = []
    for i, d in enumerate(result.output_directories):
        if d.HasField("tree_digest"):
            tree = _parse(d.tree_digest, f"action_result.output_directories[{i}].tree_digest")
            trees.append(tree)
            digests.append(tree)
        if d.HasField("root_directory_digest"):
            digests.append(
                _parse(
                    d.root_directory_digest,
                    f"action_result.output_directories[{i}].root_directory_digest",
                )
            )
    present_trees = set(trees) - set(await missing_digests(store, trees)) if trees else set()
    for tree_digest in trees:
        if tree_digest not in present_trees:
            continue
        tree_message = await read_message(store, tree_digest, re_pb2.Tree)
        for directory in (tree_message.root, *tree_message.children):
            for node in directory.files:
                digests.append(_parse(node.digest, f"tree {tree_digest} file {node.name!r}"))
    return digests


async def _inline(
    store: BlobStore,
    result: re_pb2.ActionResult,
    request: re_pb2.GetActionResultRequest,
    budget: int,
) -> None:
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
    """The cached result, complete and with requested inlining; else ``NotFound``."""
    check_digest_function(request.digest_function, request.action_digest.hash)
    action = _parse(request.action_digest, "action_digest")
    cache = backends.action_cache
    stored = await cache.get(action) if cache is not None else None
    if stored is None:
        raise NotFound(f"action_digest: no cached result for {action}")
    try:
        missing = await missing_digests(
            backends.cas, await referenced_digests(backends.cas, stored)
        )
    except InvalidArgument:
        missing = [action]  # a malformed stored result is as good as none
    if missing:
        raise NotFound(
            f"action_digest: the cached result for {action} references "
            f"{len(missing)} blob(s) no longer in the CAS"
        )
    result = re_pb2.ActionResult()
    result.CopyFrom(stored)
    await _inline(backends.cas, result, request, max_inline_bytes)
    return result


async def update_action_result(
    backends: InstanceBackends, request: re_pb2.UpdateActionResultRequest
) -> re_pb2.ActionResult:
    """Store the result after checking its digests and that its blobs exist.

    Raises ``PermissionDenied`` for a read-only or absent action cache,
    ``InvalidArgument`` naming a malformed digest, and ``MissingBlobs``
    (FAILED_PRECONDITION) listing referenced blobs not in the CAS.
    """
    check_digest_function(request.digest_function, request.action_digest.hash)
    action = _parse(request.action_digest, "action_digest")
    cache = backends.action_cache
    if cache is None or backends.ac_read_only:
        raise PermissionDenied(
            f"instance_name: {request.instance_name!r} does not accept action cache updates"
        )
    result = request.action_result
    missing = await missing_digests(backends.cas, await referenced_digests(backends.cas, result))
    if missing:
        raise MissingBlobs([d.subject for d in missing])
    await cache.put(action, result)
    return result
