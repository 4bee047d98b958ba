"""Build the configured stores and action caches (part of the composition root).

Each ``stores[]`` entry becomes either a blob store or an action cache,
depending on how other blocks refer to it: a name used as an ``ac_store``
anywhere is built as an action cache, every other name as a blob store.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import trio

from lre.cas import (
    ActionCache,
    ActionResultCache,
    BlobStore,
    DirectoryReader,
    FastSlowActionCache,
    FastSlowStore,
    FilesystemActionCache,
    FilesystemStore,
    GrpcActionCache,
    GrpcStore,
    MemoryActionCache,
    MemoryStore,
    VerifyStore,
)
from lre.config import Config, FilesystemStoreSpec, GrpcStoreSpec, StoreSpec
from lre.upstream import UpstreamClient, UpstreamStatistics

log = logging.getLogger("lre.cas")


def _log_overrun(message: str) -> None:
    """How a filesystem store's overrun of max_bytes is said (once per episode)."""
    log.warning("%s", message)


#: Threads the stores may use together for blocking file I/O.
STORE_THREADS = 8


class StoreBuildError(Exception):
    """A store cannot be built (names the store and the reason)."""


def action_cache_names(config: Config) -> set[str]:
    """Names referred to as an action cache anywhere in ``config``."""
    names: set[str] = set()
    for server in config.servers:
        names.update(i.ac_store for i in server.instances if i.ac_store)
    for scheduler in config.schedulers:
        if scheduler.simple is not None and scheduler.simple.ac_store:
            names.add(scheduler.simple.ac_store)
    for worker in config.workers:
        if worker.local is not None and worker.local.upload_action_result.ac_store:
            names.add(worker.local.upload_action_result.ac_store)
    # The tiers of a fast_slow action cache are action caches too.
    specs = {spec.name: spec for spec in config.stores}
    pending = list(names)
    while pending:
        spec = specs.get(pending.pop())
        if spec is not None and spec.fast_slow is not None:
            for tier in (spec.fast_slow.fast, spec.fast_slow.slow):
                if tier not in names:
                    names.add(tier)
                    pending.append(tier)
    return names


def upstream_client(name: str, spec: GrpcStoreSpec) -> UpstreamClient:
    """The client of a grpc store (endpoints, headers, retries, pool, limits)."""
    return UpstreamClient(
        spec.endpoints,
        name=name,
        headers=spec.headers,
        retry=spec.retry,
        connections_per_endpoint=spec.connections_per_endpoint,
        max_concurrent_requests=spec.max_concurrent_requests,
    )


@dataclass
class Stores:
    """The live stores, by config name.

    Besides every blob store and action cache, the builder records by name
    the stores of the kinds other parts act on directly (filesystem stores
    and caches for open/close and ``lre cache``, grpc stores for uploads,
    fast_slow action caches for the miss report), as it builds them, so
    nothing has to test a store's type afterwards.
    """

    blobs: dict[str, BlobStore] = field(default_factory=dict)
    action_caches: dict[str, ActionCache] = field(default_factory=dict)
    filesystems: dict[str, FilesystemStore] = field(default_factory=dict)
    filesystem_caches: dict[str, FilesystemActionCache] = field(default_factory=dict)
    grpc_stores: dict[str, GrpcStore] = field(default_factory=dict)
    fast_slow_caches: dict[str, FastSlowActionCache] = field(default_factory=dict)
    directory_readers: dict[str, DirectoryReader] = field(default_factory=dict)
    upstreams: list[GrpcStore | GrpcActionCache] = field(default_factory=list)

    def blob(self, name: str) -> BlobStore:
        try:
            return self.blobs[name]
        except KeyError:
            raise StoreBuildError(f"store {name!r} is not a blob store") from None

    def directories(self, name: str) -> DirectoryReader:
        """The one ``DirectoryReader`` of blob store ``name``, shared by the
        schedulers, workers and forwarders using that store."""
        reader = self.directory_readers.get(name)
        if reader is None:
            reader = self.directory_readers[name] = DirectoryReader(self.blob(name))
        return reader

    def results(self, ac_name: str, cas_name: str) -> ActionResultCache:
        """The action cache ``ac_name`` checked for completeness against ``cas_name``."""
        try:
            ac = self.action_caches[ac_name]
        except KeyError:
            raise StoreBuildError(f"store {ac_name!r} is not an action cache") from None
        return ActionResultCache(ac, self.blob(cas_name))

    def upstream_statistics(self) -> list[UpstreamStatistics]:
        """Health of every upstream store (for /status and the TUI)."""
        return [store.upstream_statistics() for store in self.upstreams]

    async def open(self) -> None:
        """Open the filesystem stores and action caches (rebuilds their
        indexes from disk)."""
        for store in self.filesystems.values():
            await store.open()
        for cache in self.filesystem_caches.values():
            await cache.open()

    async def save_uses(
        self,
        interval_s: float = 60.0,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Every ``interval_s``, save each filesystem store's recent uses as
        file mtimes, so a crash of lre loses at most that much of the cache
        contract's record (a restart rebuilds it from the mtimes). Runs until
        cancelled; an ``OSError`` of one round is logged and the next retries."""
        task_status.started()
        while True:
            await trio.sleep(interval_s)
            for store in self.filesystems.values():
                try:
                    await store.flush_access_times()
                except OSError as error:
                    log.warning("saving the uses of %s failed: %s", store.content_path, error)

    async def close(self) -> None:
        for store in self.filesystems.values():
            with trio.CancelScope(shield=True):
                await store.close()
        for cache in self.filesystem_caches.values():
            cache.close()
        for upstream in self.upstreams:
            with trio.CancelScope(shield=True):
                await upstream.aclose()


def _max_bytes(value: object, name: str) -> int:
    if not isinstance(value, int):
        raise StoreBuildError(f"stores[{name}].eviction_policy.max_bytes: {value!r} unresolved")
    return value


def temp_path_of(spec: FilesystemStoreSpec) -> str:
    """Where a filesystem store keeps uploads in progress: its ``temp_path``,
    by default ``tmp`` beside its content directory."""
    return spec.temp_path or os.path.join(os.path.dirname(spec.content_path.rstrip("/")), "tmp")


def build_stores(config: Config) -> Stores:
    """Build every store of ``config`` (which must be ``resolve``d).

    Raises ``StoreBuildError`` naming the store when one cannot be built.
    """
    specs = {spec.name: spec for spec in config.stores}
    ac_names = action_cache_names(config)
    stores = Stores()
    limiter = trio.CapacityLimiter(STORE_THREADS)

    def build(name: str, chain: Iterable[str] = ()) -> BlobStore:
        if name in stores.blobs:
            return stores.blobs[name]
        spec: StoreSpec = specs[name]
        store: BlobStore
        if spec.memory is not None:
            policy = spec.memory.eviction_policy
            store = MemoryStore(
                _max_bytes(policy.max_bytes, name), evict_bytes=int(policy.evict_bytes)
            )
        elif spec.filesystem is not None:
            fs = spec.filesystem
            filesystem = FilesystemStore(
                fs.content_path,
                temp_path_of(fs),
                _max_bytes(fs.eviction_policy.max_bytes, name),
                evict_bytes=int(fs.eviction_policy.evict_bytes),
                fsync=fs.fsync,
                read_chunk_size=int(fs.read_buffer_size),
                thread_limiter=limiter,
                keep_told_s=float(fs.eviction_policy.keep_told),
                min_free_bytes=int(fs.eviction_policy.min_free_disk),
                on_overrun=_log_overrun,
            )
            stores.filesystems[name] = filesystem
            store = filesystem
        elif spec.fast_slow is not None:
            store = FastSlowStore(
                build(spec.fast_slow.fast),
                build(spec.fast_slow.slow),
                write_policy=spec.fast_slow.write_policy,
            )
        elif spec.verify is not None:
            store = VerifyStore(
                build(spec.verify.backend),
                verify_size=spec.verify.verify_size,
                verify_hash=spec.verify.verify_hash,
            )
        elif spec.grpc is not None:
            if spec.grpc.store_type != "cas":
                raise StoreBuildError(
                    f"stores[{name}].grpc.store_type: {spec.grpc.store_type!r} store used "
                    "as a blob store (it must be referred to as an ac_store)"
                )
            grpc_store = GrpcStore(
                upstream_client(name, spec.grpc), instance_name=spec.grpc.instance_name
            )
            stores.upstreams.append(grpc_store)
            stores.grpc_stores[name] = grpc_store
            store = grpc_store
        else:
            raise StoreBuildError(f"stores[{name}]: no store kind given")
        stores.blobs[name] = store
        return store

    def upstream_cas_for(grpc: GrpcStoreSpec) -> tuple[BlobStore | None, GrpcStore | None]:
        """(local source, upstream CAS) for uploading a result's blobs: the
        fast_slow store whose slow tier is a grpc CAS at the same address and
        instance as ``grpc``."""
        for other in config.stores:
            if other.fast_slow is None or other.name in ac_names:
                continue
            slow = specs[other.fast_slow.slow].grpc
            if (
                slow is not None
                and slow.store_type == "cas"
                and slow.endpoints[0].address == grpc.endpoints[0].address
                and slow.instance_name == grpc.instance_name
            ):
                source = build(other.name)
                return source, stores.grpc_stores[other.fast_slow.slow]
        return None, None

    def build_ac(name: str) -> ActionCache:
        if name in stores.action_caches:
            return stores.action_caches[name]
        spec = specs[name]
        cache: ActionCache
        if spec.filesystem is not None:
            cache = FilesystemActionCache(
                spec.filesystem.content_path,
                fsync=spec.filesystem.fsync,
                thread_limiter=limiter,
                max_bytes=_max_bytes(spec.filesystem.eviction_policy.max_bytes, name),
            )
            stores.filesystem_caches[name] = cache
        elif spec.memory is not None:
            cache = MemoryActionCache(_max_bytes(spec.memory.eviction_policy.max_bytes, name))
        elif spec.fast_slow is not None:
            fast_slow = FastSlowActionCache(
                build_ac(spec.fast_slow.fast),
                build_ac(spec.fast_slow.slow),
                write_policy=spec.fast_slow.write_policy,
            )
            stores.fast_slow_caches[name] = fast_slow
            cache = fast_slow
        elif spec.grpc is not None and spec.grpc.store_type == "ac":
            source, upstream_cas = upstream_cas_for(spec.grpc)
            grpc_cache = GrpcActionCache(
                upstream_client(name, spec.grpc),
                instance_name=spec.grpc.instance_name,
                upload_policy=spec.grpc.upload_policy,
                blob_source=source,
                upstream_cas=upstream_cas,
            )
            stores.upstreams.append(grpc_cache)
            cache = grpc_cache
        else:
            raise StoreBuildError(
                f"stores[{name}]: an action cache must be a filesystem, memory, fast_slow "
                'or grpc (store_type "ac") store'
            )
        stores.action_caches[name] = cache
        return cache

    for spec in config.stores:
        if spec.name in ac_names:
            build_ac(spec.name)
        else:
            build(spec.name)
    return stores
