"""Config models of the ``stores`` section: one class per JSON5 object.

Also the upstream connection settings (``EndpointSpec``, ``TlsClientSpec``,
``RetrySpec``) that the grpc store and the forward scheduler share.
Conventions in ``_model_fields``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from lre.config._model_fields import ByteSize, Seconds, doc


@dataclass(frozen=True, slots=True, kw_only=True)
class EvictionPolicy:
    max_bytes: ByteSize | Literal["auto"] = doc(
        "Evict least recently used blobs once the store holds more than this. "
        '"auto" means 25% of the free disk space at start, at most 50 GiB '
        "(filesystem) or 1 GiB (memory). 0 is refused: no store is unbounded.",
        default="auto",
    )
    evict_bytes: ByteSize = doc(
        "Extra bytes freed below max_bytes once eviction starts, so it does not run "
        "on every write.",
        default=ByteSize(0),
    )

    #: Keys NativeLink's eviction policy has and lre refuses, with the error
    #: given (a blob's life is bounded by size and the clients' lifetime
    #: contract, not by its age or the number of blobs).
    RETIRED_KEYS: ClassVar[Mapping[str, str]] = {
        "max_seconds": "not a setting of lre: lre does not evict by age (blobs must "
        "outlive the clients' 3 h TTL); bound the store with max_bytes",
        "max_count": "not a setting of lre: lre does not evict by blob count; bound the "
        "store with max_bytes",
    }
    keep_told: Seconds = doc(
        "The cache contract (filesystem stores): a blob lre told a client exists (a "
        "FindMissingBlobs answer, a result it served, an upload it accepted) is not evicted "
        "for this long after that, since clients rely on it: Bazel's "
        "--experimental_remote_cache_ttl and Buck2's cas_ttl_secs are 3 h. 0 = plain LRU "
        "(a build may then fail on a blob evicted under it).",
        default=Seconds(10800),
    )
    min_free_disk: ByteSize = doc(
        "Free-disk floor (filesystem stores): when blobs under the contract fill max_bytes "
        "the store overruns it (logged once, shown in /status and `lre doctor`) while the "
        "disk keeps this much free; past it a new upload or output fails with "
        "RESOURCE_EXHAUSTED naming the floor, so lre's own state never meets a full disk. "
        "0 = no overrun: a store full of such blobs refuses writes.",
        default=ByteSize(2 << 30),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryStoreSpec:
    eviction_policy: EvictionPolicy = doc(
        "When blobs are dropped (LRU).", default_factory=EvictionPolicy
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FilesystemStoreSpec:
    content_path: str = doc(
        "Directory holding the blobs, sharded by hash prefix (as an action cache: "
        "one append-only file, actions.log)."
    )
    temp_path: str = doc(
        "Directory for uploads in progress; must be on the same filesystem as "
        'content_path. Empty means "<content_path>/../tmp".',
        default="",
    )
    eviction_policy: EvictionPolicy = doc(
        "When blobs are deleted (LRU, pinned blobs excepted). As an action cache only "
        "max_bytes applies: the oldest results are dropped when the log is rewritten.",
        default_factory=EvictionPolicy,
    )
    fsync: Literal["never", "always"] = doc(
        '"always" fsyncs each blob before it becomes visible (survives power loss); '
        '"never" relies on the atomic rename alone (survives a crash of lre, not of '
        "the machine). Either way no partial blob is ever visible.",
        default="never",
    )
    read_buffer_size: ByteSize = doc("Chunk size for reads.", default=ByteSize(1 << 20))


@dataclass(frozen=True, slots=True, kw_only=True)
class FastSlowStoreSpec:
    fast: str = doc("Name of the fast (local) store.")
    slow: str = doc("Name of the slow store (usually a grpc store).")
    write_policy: Literal["both", "fast_only"] = doc(
        'Where writes go: "both" tiers, or only the fast one.', default="both"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyStoreSpec:
    backend: str = doc("Name of the wrapped store.")
    verify_size: bool = doc("Reject writes whose size differs from the digest.", default=True)
    verify_hash: bool = doc("Reject writes whose SHA256 differs from the digest.", default=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsClientSpec:
    ca_file: str = doc(
        "PEM file of the CA that signed the server; empty = system roots.", default=""
    )
    cert_file: str = doc("PEM client certificate for mutual TLS.", default="")
    key_file: str = doc("PEM key of cert_file.", default="")


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointSpec:
    address: str = doc('"grpc://host:port" (plaintext) or "grpcs://host:port" (TLS).')
    tls: TlsClientSpec = doc("TLS settings for grpcs://.", default_factory=TlsClientSpec)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrySpec:
    max_retries: int = doc("Retries after the first attempt.", default=4)
    delay: Seconds = doc("First backoff delay; doubled each retry.", default=Seconds(0.1))
    max_delay: Seconds = doc("Largest backoff delay.", default=Seconds(5))


@dataclass(frozen=True, slots=True, kw_only=True)
class GrpcStoreSpec:
    endpoints: tuple[EndpointSpec, ...] = doc("Upstream endpoints, tried in order.")
    instance_name: str = doc("Instance name sent upstream.", default="")
    store_type: Literal["cas", "ac"] = doc(
        "Which upstream service this store reads.", default="cas"
    )
    headers: dict[str, str] = doc(
        'Extra request headers, e.g. {"authorization": "Bearer ${TOKEN}"}.',
        default_factory=dict,
    )
    retry: RetrySpec = doc(
        "Backoff on UNAVAILABLE / RESOURCE_EXHAUSTED.", default_factory=RetrySpec
    )
    connections_per_endpoint: int = doc("gRPC channels opened per endpoint.", default=1)
    max_concurrent_requests: int = doc("In-flight requests upstream at most.", default=64)
    upload_policy: Literal["never", "success_only", "everything"] = doc(
        "For store_type ac: which local results are written upstream.", default="never"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreSpec:
    ONE_OF: ClassVar[tuple[str, ...]] = ("memory", "filesystem", "fast_slow", "verify", "grpc")
    name: str = doc("Name other blocks use to refer to this store.")
    memory: MemoryStoreSpec | None = doc("An in-memory LRU store.", default=None)
    filesystem: FilesystemStoreSpec | None = doc("A store on local disk.", default=None)
    fast_slow: FastSlowStoreSpec | None = doc("A fast tier over a slow tier.", default=None)
    verify: VerifyStoreSpec | None = doc("Checks hash and size of writes.", default=None)
    grpc: GrpcStoreSpec | None = doc("An upstream REAPI CAS or action cache.", default=None)
