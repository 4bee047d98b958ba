"""Action caches over an upstream: ``GrpcActionCache`` and ``FastSlowActionCache``.

``GrpcActionCache`` is an ``ActionCache`` backed by an upstream ActionCache
service:

- ``get``: GetActionResult; NOT_FOUND is a miss. When the upstream cannot
  be reached it is a miss too (``degrade``), so a build carries on locally.
- ``put``: governed by ``upload_policy``: ``never`` (the default: a laptop
  does not fill a team cache unless told to), ``success_only`` (exit code 0
  only) or ``everything``. Before UpdateActionResult, every blob the result
  references that the upstream lacks is copied there from ``blob_source``
  (lre's workers move outputs straight into the local store, so they are
  not upstream yet). With ``degrade`` an unreachable upstream or a refused
  upload is dropped (an unreachable upstream is reported once by its health,
  a refused upload is logged as a warning); nothing is raised to the worker.

``FastSlowActionCache`` puts a local action cache in front: ``get`` asks
the fast tier, then the slow one, and copies a slow hit into the fast tier
(its blobs are not fetched: the fast_slow CAS reads them through when a
client asks). ``put`` writes the fast tier, then the slow one unless
``write_policy`` is ``fast_only``.
"""

from __future__ import annotations

import collections
import logging
from typing import Literal

from google.protobuf.message import DecodeError

from lre.cas._protocol import BlobStore
from lre.cas._wrappers import Tiers, WritePolicy
from lre.cas.action_cache._caches import ActionCache
from lre.cas.remote._store import GrpcStore
from lre.cas.remote._uploads import result_blobs, upload_missing
from lre.digest import Digest
from lre.errors import InvalidArgument, LreError, NotFound, ResourceExhausted
from lre.proto import re_grpc, re_pb2
from lre.upstream import (
    UpstreamClient,
    UpstreamStatistics,
    UpstreamUnavailable,
)

log = logging.getLogger("lre.cas.upstream")

UploadPolicy = Literal["never", "success_only", "everything"]


class GrpcActionCache:
    """See the module docstring."""

    def __init__(
        self,
        client: UpstreamClient,
        *,
        instance_name: str = "",
        upload_policy: UploadPolicy = "never",
        blob_source: BlobStore | None = None,
        upstream_cas: GrpcStore | None = None,
        degrade: bool = True,
    ) -> None:
        if upload_policy not in ("never", "success_only", "everything"):
            raise InvalidArgument(
                f"upload_policy: {upload_policy!r} is not never, success_only or everything"
            )
        self.client = client
        self.instance_name = instance_name
        self.upload_policy = upload_policy
        self.blob_source = blob_source
        self.upstream_cas = upstream_cas
        self.degrade = degrade
        self.uploaded_results = 0
        self.skipped_results = 0
        self.failed_uploads = 0

    def known_absent(self, action_digest: Digest) -> bool:
        """Never: only the upstream knows what it holds."""
        return False

    def upstream_statistics(self) -> UpstreamStatistics:
        return self.client.statistics()

    async def aclose(self) -> None:
        await self.client.aclose()

    async def get(self, action_digest: Digest) -> bytes | None:
        request = re_pb2.GetActionResultRequest(
            instance_name=self.instance_name, action_digest=action_digest.to_proto()
        )

        counters = self.client.health.counters
        try:
            result: re_pb2.ActionResult = await self.client.call(
                re_grpc.ActionCacheStub, "GetActionResult", request
            )
        except NotFound:
            counters["ac_misses"] += 1
            return None
        except UpstreamUnavailable:
            counters["ac_misses"] += 1
            if not self.degrade:
                raise
            return None
        counters["ac_hits"] += 1
        return result.SerializeToString(deterministic=True)

    def wants(self, result: re_pb2.ActionResult) -> bool:
        """Whether ``upload_policy`` sends ``result`` upstream."""
        if self.upload_policy == "never":
            return False
        return self.upload_policy == "everything" or result.exit_code == 0

    async def put(self, action_digest: Digest, data: bytes) -> None:
        if self.upload_policy == "never":
            self.skipped_results += 1
            return
        result = re_pb2.ActionResult()
        try:
            result.ParseFromString(data)
        except DecodeError:
            raise InvalidArgument(
                f"action result for {action_digest} does not parse as an ActionResult"
            ) from None
        if not self.wants(result):
            self.skipped_results += 1
            return
        try:
            await self._upload(action_digest, result)
        except LreError as error:
            if not self.degrade or isinstance(error, InvalidArgument):
                raise
            self.failed_uploads += 1
            # An unreachable upstream was already reported once by its health.
            level = logging.DEBUG if isinstance(error, UpstreamUnavailable) else logging.WARNING
            log.log(
                level,
                "action result for %s not uploaded to upstream %s: %s",
                action_digest,
                self.client.name,
                error.message,
            )
            return
        self.uploaded_results += 1

    async def _upload(self, action_digest: Digest, result: re_pb2.ActionResult) -> None:
        if self.blob_source is not None and self.upstream_cas is not None:
            blobs = await result_blobs(result, self.blob_source)
            await upload_missing(self.blob_source, self.upstream_cas.strict(), blobs)
        request = re_pb2.UpdateActionResultRequest(
            instance_name=self.instance_name,
            action_digest=action_digest.to_proto(),
            action_result=result,
        )

        await self.client.call(re_grpc.ActionCacheStub, "UpdateActionResult", request)


class FastSlowActionCache(Tiers[ActionCache]):
    """See the module docstring."""

    def __init__(
        self, fast: ActionCache, slow: ActionCache, *, write_policy: WritePolicy = "both"
    ) -> None:
        super().__init__(fast, slow, write_policy=write_policy)
        self.slow_hits = 0
        self.slow_misses = 0
        #: Slow-tier misses since its last hit (what "lookups keep missing" watches).
        self.slow_misses_in_a_row = 0
        #: The action digests of the latest slow-tier misses, newest last.
        self.recent_slow_misses: collections.deque[Digest] = collections.deque(maxlen=16)

    def known_absent(self, action_digest: Digest) -> bool:
        """Never: every lookup goes through ``get``, which counts the slow
        tier's misses (what the miss report watches), even when both tiers
        could tell from memory that they hold nothing."""
        return False

    async def get(self, action_digest: Digest) -> bytes | None:
        data = await self.fast.get(action_digest)
        if data is not None:
            return data
        data = await self.slow.get(action_digest)
        if data is None:
            self.slow_misses += 1
            self.slow_misses_in_a_row += 1
            self.recent_slow_misses.append(action_digest)
            return None
        self.slow_hits += 1
        self.slow_misses_in_a_row = 0
        try:
            await self.fast.put(action_digest, data)
        except ResourceExhausted:
            pass  # served anyway; the next lookup asks the slow tier again
        return data

    async def put(self, action_digest: Digest, data: bytes) -> None:
        await self.fast.put(action_digest, data)
        if self.write_policy == "both":
            await self.slow.put(action_digest, data)
