"""``ActionResultCache``: action results that are only served when complete."""

from __future__ import annotations

from google.protobuf.message import DecodeError

from lre.cas._blob_io import missing_digests, read_message
from lre.cas._protocol import BlobStore
from lre.cas.action_cache._caches import ActionCache
from lre.cas.action_cache._result_paths import check_result_paths
from lre.cas.trees._tree import tree_file_digests
from lre.digest import Digest
from lre.errors import InvalidArgument, MissingBlobs, NotFound
from lre.proto import re_pb2


def named_digests(result: re_pb2.ActionResult) -> tuple[list[Digest], list[Digest]]:
    """The digests ``result`` names itself (output files, stdout/stderr, each
    output directory's ``Tree`` and root ``Directory``), and of those the
    ``Tree`` blobs, whose files it references too. Raises ``InvalidArgument``
    naming the field of a malformed digest."""
    direct: list[Digest] = []
    for i, output_file in enumerate(result.output_files):
        direct.append(Digest.from_proto(output_file.digest, field=f"output_files[{i}].digest"))
    for name in ("stdout_digest", "stderr_digest"):
        if result.HasField(name):
            direct.append(Digest.from_proto(getattr(result, name), field=name))
    trees: list[Digest] = []
    for i, output_dir in enumerate(result.output_directories):
        tree = Digest.from_proto(
            output_dir.tree_digest, field=f"output_directories[{i}].tree_digest"
        )
        trees.append(tree)
        direct.append(tree)
        if output_dir.HasField("root_directory_digest"):
            direct.append(
                Digest.from_proto(
                    output_dir.root_directory_digest,
                    field=f"output_directories[{i}].root_directory_digest",
                )
            )
    return direct, trees


class ActionResultCache:
    """``ActionResult`` messages in an ``ActionCache``, checked against a CAS.

    A result is *complete* when every blob it references is in ``cas``:
    output files, stdout/stderr digests, output directory ``Tree`` blobs
    (and ``root_directory_digest`` when set) and every file inside those
    trees. ``get_result`` serves only complete results, so a client whose
    outputs were evicted re-runs the action instead of failing later.
    """

    def __init__(self, ac: ActionCache, cas: BlobStore) -> None:
        self.ac = ac
        self.cas = cas

    def known_absent(self, action_digest: Digest) -> bool:
        """Whether the cache can tell from memory alone, safely from any
        thread, that it holds no entry for ``action_digest`` (a local
        filesystem or memory cache; an upstream one never can)."""
        return self.ac.known_absent(action_digest)

    async def get_result(self, action_digest: Digest) -> re_pb2.ActionResult | None:
        """The stored result, or ``None`` when absent, unparsable or incomplete."""
        data = await self.ac.get(action_digest)
        if data is None:
            return None
        result = re_pb2.ActionResult()
        try:
            result.ParseFromString(data)
            missing = await self.missing_blobs(result)
        except (DecodeError, InvalidArgument):
            return None
        return None if missing else result

    async def put_result(
        self, action_digest: Digest, result: re_pb2.ActionResult
    ) -> re_pb2.ActionResult:
        """Store ``result`` for ``action_digest`` and return it.

        A result without ``execution_metadata`` gets an empty one (Buck2
        rejects any result lacking it, replies to UpdateActionResult
        included).

        Raises ``MissingBlobs`` (FAILED_PRECONDITION) naming every referenced
        blob absent from the CAS, ``InvalidArgument`` for a malformed digest,
        output tree, output path or symlink target (see ``_result_paths``),
        and ``ResourceExhausted`` when the cache is full. Nothing is stored on
        error.
        """
        check_result_paths(result)
        if not result.HasField("execution_metadata"):
            completed = re_pb2.ActionResult()
            completed.CopyFrom(result)
            completed.execution_metadata.SetInParent()
            result = completed
        missing = await self.missing_blobs(result)
        if missing:
            subjects = [d.subject for d in missing]
            raise MissingBlobs(
                subjects,
                f"action result for {action_digest} references {len(subjects)} blob(s) "
                "missing from the CAS: "
                + ", ".join(subjects[:5])
                + (" ..." if len(subjects) > 5 else ""),
            )
        await self.ac.put(action_digest, result.SerializeToString(deterministic=True))
        return result

    async def missing_blobs(self, result: re_pb2.ActionResult) -> list[Digest]:
        """Every blob ``result`` references that the CAS lacks (sorted).

        Raises ``InvalidArgument`` naming the field for a malformed digest,
        and for an output ``Tree`` that does not parse or has bad names.
        """
        direct, trees = named_digests(result)
        missing = set(await missing_digests(self.cas, direct))
        inner: set[Digest] = set()
        for tree in dict.fromkeys(trees):
            if tree in missing:
                continue
            try:
                message = await read_message(self.cas, tree, re_pb2.Tree)
            except NotFound:
                missing.add(tree)
                continue
            inner |= tree_file_digests(message, tree)
        if inner:
            missing.update(await missing_digests(self.cas, inner))
        return sorted(missing)
