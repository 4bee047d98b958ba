"""Typed, frozen config models. One class per JSON5 object.

Conventions the loader (``_loader.py``) relies on:

- Every model is a frozen dataclass; each field's ``metadata["doc"]`` is its
  one-line documentation (docs/configuration.md is generated from it).
- ``ByteSize`` fields take an integer or a string such as ``"512MiB"``,
  ``"10gb"``; ``Seconds`` fields take a number or a string such as ``"1h2m"``,
  ``"250ms"``.
- A class with a ``ONE_OF`` tuple is a tagged union: exactly one of the named
  fields must be given (``{"name": "CAS", "filesystem": {...}}``).
- Unknown keys are an error everywhere. Every string value may use ``${VAR}``
  and ``${VAR:-default}``.

Parsing builds no live objects; ``lre.app`` builds them from these models.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NewType

ByteSize = NewType("ByteSize", int)
Seconds = NewType("Seconds", float)


def doc(text: str, **kwargs: Any) -> Any:
    """A dataclass field with its documentation attached."""
    metadata = {"doc": text}
    return field(metadata=metadata, **kwargs)


# ------------------------------------------------------------------ stores


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

    #: Keys NativeLink's eviction policy has and lre refuses, with the reason
    #: the error gives (a blob's life is bounded by size and the clients'
    #: lifetime contract, not by its age or the number of blobs).
    RETIRED_KEYS: ClassVar[Mapping[str, str]] = {
        "max_seconds": "lre does not evict by age (blobs must outlive the clients' "
        "3 h TTL); bound the store with max_bytes",
        "max_count": "lre does not evict by blob count; bound the store with max_bytes",
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


# ------------------------------------------------------------------ schedulers

PropertyType = Literal["minimum", "exact", "priority", "ignore"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SimpleSchedulerSpec:
    supported_platform_properties: dict[str, PropertyType] = doc(
        'How each platform key matches: "minimum" (numeric, reserved while running), '
        '"exact", "priority" (worker must have it) or "ignore". An action naming a key '
        "not listed here fails at once.",
        default_factory=lambda: {
            "cpu_count": "minimum",
            "memory_kb": "minimum",
            "OSFamily": "exact",
            "ISA": "exact",
            "pool": "exact",
            "block-network": "ignore",
            "requires-network": "ignore",
            "sandbox-writable-path": "ignore",
            "sandbox-debug": "ignore",
        },
    )
    retain_completed_for_s: Seconds = doc(
        "How long a finished operation stays retrievable with WaitExecution.",
        default=Seconds(60),
    )
    max_job_retries: int = doc(
        "Requeues after an infrastructure failure (lost worker, internal error). "
        "An action's own non-zero exit is a result and is never retried.",
        default=2,
    )
    progress_interval_s: Seconds = doc(
        "Interval of progress updates on Execute streams while an action waits or runs "
        "(at most 30; every waiting stream gets one per interval, so with thousands queued "
        "a short interval costs CPU: one message per queued stream per interval).",
        default=Seconds(25),
    )
    ac_store: str = doc(
        "Action cache consulted before queueing (empty = no cache lookup).", default=""
    )
    cas_store: str = doc("CAS checked for the action's inputs before queueing.", default="")


@dataclass(frozen=True, slots=True, kw_only=True)
class PropertyValue:
    name: str = doc("Property name.")
    value: str = doc("Property value.")


@dataclass(frozen=True, slots=True, kw_only=True)
class PropertyModification:
    ONE_OF: ClassVar[tuple[str, ...]] = ("add", "remove", "replace")
    add: PropertyValue | None = doc("Add this property when the action lacks it.", default=None)
    remove: str | None = doc("Remove the property of this name.", default=None)
    replace: PropertyValue | None = doc("Set this property, replacing any value.", default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class PropertyModifierSpec:
    modifications: tuple[PropertyModification, ...] = doc("Applied in order.")
    scheduler: str = doc("Name of the scheduler that receives the modified actions.")


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardRulesSpec:
    unsatisfiable: bool = doc(
        "Forward actions no local worker can ever run (e.g. OSFamily=windows).", default=True
    )
    overflow_queue_depth: int = doc(
        "Forward new actions a local worker could run while more than this many actions "
        "wait locally (routed to the local scheduler, not yet executing); 0 = never.",
        default=0,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamPlatformSpec:
    drop: tuple[str, ...] = doc(
        "Keys removed from a forwarded action's platform (lre's own resource keys by default).",
        default=("cpu_count", "memory_kb"),
    )
    keep: tuple[str, ...] = doc(
        "When not empty, only these keys (after drop) are forwarded.", default=()
    )
    rename: dict[str, str] = doc("Keys renamed, old name to new name.", default_factory=dict)
    set: dict[str, str] = doc(
        "Properties set on every forwarded action, replacing any value.", default_factory=dict
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardSchedulerSpec:
    local: str = doc("Name of the local scheduler.")
    endpoint: EndpointSpec = doc("Upstream Execution service.")
    instance_name: str = doc("Instance name sent upstream.", default="")
    headers: dict[str, str] = doc("Extra request headers.", default_factory=dict)
    upstream_cas_store: str = doc("grpc store used to upload inputs upstream.", default="")
    rules: ForwardRulesSpec = doc("Which actions go upstream.", default_factory=ForwardRulesSpec)
    platform: UpstreamPlatformSpec = doc(
        "How a forwarded action's platform is rewritten for the upstream "
        "(drop, then keep, rename, set).",
        default_factory=UpstreamPlatformSpec,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerSpec:
    ONE_OF: ClassVar[tuple[str, ...]] = ("simple", "property_modifier", "forward")
    name: str = doc("Name other blocks use to refer to this scheduler.")
    simple: SimpleSchedulerSpec | None = doc("The in-process scheduler.", default=None)
    property_modifier: PropertyModifierSpec | None = doc(
        "Rewrites platform properties, then hands over.", default=None
    )
    forward: ForwardSchedulerSpec | None = doc(
        "Sends some actions to an upstream REAPI cluster.", default=None
    )


# ------------------------------------------------------------------ workers


@dataclass(frozen=True, slots=True, kw_only=True)
class PlatformPropertySpec:
    values: tuple[str, ...] = doc("Values this worker offers.", default=())
    query_cmd: str = doc("Shell command run at start; each output line is one value.", default="")


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvironmentSource:
    source: Literal[
        "value", "property", "from_environment", "timeout_millis", "action_directory"
    ] = doc("Where the variable's value comes from.")
    value: str = doc(
        "The literal (value), the platform property name (property) or the variable "
        "of lre's own environment (from_environment).",
        default="",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class JobserverSpec:
    enabled: bool = doc("Give each action a private GNU make jobserver pool.", default=True)
    style: Literal["pipe", "fifo"] = doc(
        '"pipe" works with make 3.8x-4.4, cargo and gcc; "fifo" for make >= 4.4 and ninja 1.13.',
        default="pipe",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class LearnerSpec:
    enabled: bool = doc("Learn reservations from past runs of the same kind.", default=True)
    window: Seconds = doc("Samples older than this are forgotten.", default=Seconds(7 * 86400))
    percentile: float = doc("Percentile of past peaks that is reserved.", default=95.0)
    factor: float = doc("Reservation = percentile x factor.", default=1.2)
    min_memory: ByteSize = doc(
        "Least memory a learned reservation holds (a kind whose runs peaked at 2 MiB "
        "reserves this, so tiny samples do not make reservations that nothing fits).",
        default=ByteSize(64 << 20),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceSpec:
    cpu_count: int | Literal["auto"] = doc(
        'CPUs this worker offers; "auto" = the machine\'s CPU count.', default="auto"
    )
    cpu_overcommit: float = doc(
        "Capacity = cpu_count x this factor (also sets max_inflight_tasks auto). 1.5 runs "
        "three one-CPU actions on two cores, filling the gaps while one starts or ends "
        "(chosen by the firehose benchmark, docs/resource-control.md).",
        default=1.5,
    )
    memory_budget: ByteSize | Literal["auto"] = doc(
        'Memory all running actions may reserve together; "auto" = 75% of RAM minus '
        "memory_floor; 0 = no budget (memory never limits admission, as in NativeLink; "
        "for comparisons, not for laptops).",
        default="auto",
    )
    memory_floor: ByteSize = doc(
        "Memory kept free for the desktop when memory_budget is auto.",
        default=ByteSize(2 << 30),
    )
    cold_memory: ByteSize = doc(
        "Memory reserved by an action of a kind never seen before.", default=ByteSize(512 << 20)
    )
    kill_factor: float = doc(
        "Hard ceiling = the top ladder step (the memory budget, else the last ladder "
        "entry) x this: an action whose RSS passes it is killed and fails with "
        "RESOURCE_EXHAUSTED at any time. Below it, exceeding a reservation kills nothing.",
        default=1.2,
    )
    ladder: tuple[ByteSize, ...] = doc(
        "Memory reservations tried after successive kills under memory shortage.",
        default=(ByteSize(1 << 30), ByteSize(2 << 30), ByteSize(4 << 30), ByteSize(8 << 30)),
    )
    max_steps: int = doc("Kills after which the action fails with RESOURCE_EXHAUSTED.", default=5)
    sample_interval: Seconds = doc(
        "How often running actions' process trees are sampled.", default=Seconds(0.25)
    )
    pressure_sample_interval: Seconds = doc(
        "Sampling interval while memory is short (or an action is frozen).",
        default=Seconds(0.05),
    )
    live_memory_veto: bool = doc(
        "Do not start an action while memory is short, or while the host's available "
        "memory minus memory_headroom is less than it reserves.",
        default=True,
    )
    memory_headroom: ByteSize = doc(
        "Memory left to the rest of the machine: memory is short when the host's "
        "MemAvailable is below this (whoever uses the memory). Then no action starts "
        "and growing actions are frozen, newest first, never the oldest.",
        default=ByteSize(2 << 30),
    )
    memory_hard_floor: ByteSize = doc(
        "When MemAvailable falls below this, the newest frozen action is killed and "
        "requeued one ladder step up (freezing frees no memory). At most memory_headroom. "
        "Set a quarter above the 1 GiB the machine should never go under: the kill and "
        "the freeing of its memory take a sampling interval or two.",
        default=ByteSize(1280 << 20),
    )
    budget_short_share: float = doc(
        "Memory is short too when the running actions' summed RSS passes the memory "
        "budget x this (0-1; no budget: never).",
        default=0.9,
    )
    pressure_threshold: float = doc(
        "Memory is short too when /proc/pressure/memory's full avg10 (percent of time "
        "all tasks stalled on memory) reaches this; 0 = ignore pressure stall information.",
        default=10.0,
    )
    max_frozen: Seconds = doc(
        "A frozen action still frozen after this long is killed and requeued one ladder "
        "step up, so a steady outside memory user cannot hang a build.",
        default=Seconds(120),
    )
    thaw_interval: Seconds = doc(
        "Least time between two thaws (frozen actions wake one at a time).",
        default=Seconds(1.0),
    )
    learner: LearnerSpec = doc("Learned reservations.", default_factory=LearnerSpec)


@dataclass(frozen=True, slots=True, kw_only=True)
class UploadActionResultSpec:
    ac_store: str = doc("Action cache written after each action (empty = none).", default="")
    upload_ac_results_strategy: Literal["success_only", "never", "everything"] = doc(
        "Which results are cached.", default="success_only"
    )
    max_inline_bytes: ByteSize = doc(
        "stdout/stderr up to this size are inlined in the result.", default=ByteSize(0)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionLimitsSpec:
    """Bounds on what one action may hand lre (input trees, outputs): over
    one, that action fails with a status naming the limit; nothing else."""

    max_tree_depth: int = doc(
        "Deepest input or output directory tree, in directory levels below its root "
        "(real trees stay under 50; PATH_MAX allows about 2,000).",
        default=256,
    )
    max_tree_entries: int = doc(
        "Most files, directories and symlinks in one input or output tree, counted as "
        "staged: a subtree named twice counts twice.",
        default=2_097_152,
    )
    max_tree_directories: int = doc(
        "Most directories in one input or output tree, counted as staged (a large "
        "monorepo checkout has tens of thousands).",
        default=131_072,
    )
    max_output_bytes: ByteSize | Literal["auto"] = doc(
        "Most bytes of outputs, stdout and stderr of one action, judged from each file's "
        'size and allocated blocks before it is read; "auto" = half the worker\'s CAS '
        "max_bytes.",
        default="auto",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalWorkerSpec:
    name: str = doc("Worker name, shown in results and the TUI.")
    scheduler: str = doc("Scheduler this worker takes actions from.")
    cas_store: str = doc("Filesystem CAS the worker stages inputs from and moves outputs into.")
    work_directory: str = doc(
        "Root of this worker's action directories; lre locks it for its lifetime."
    )
    max_inflight_tasks: int | Literal["auto"] = doc(
        'Actions run at once at most; "auto" = whole CPUs of capacity, '
        "floor(cpu_count x cpu_overcommit); 0 = unlimited.",
        default="auto",
    )
    max_action_timeout_s: Seconds = doc(
        "Longest timeout an action may ask for; longer requests are rejected.",
        default=Seconds(3600),
    )
    default_timeout_s: Seconds = doc("Timeout of actions that set none.", default=Seconds(1200))
    kill_grace_s: Seconds = doc(
        "Between SIGTERM and SIGKILL of an action's process group.", default=Seconds(2)
    )
    nice: int = doc(
        "Niceness (0-19) action processes start with; lre itself stays at 0, so finishing "
        "one action and starting the next, and the desktop, are not queued behind busy "
        "compilers (docs/resource-control.md). 0 = as lre.",
        default=5,
    )
    entrypoint: tuple[str, ...] = doc("Command placed before each action's argv.", default=())
    precondition_script: str = doc(
        "Run before each action; non-zero exit means backpressure (requeue).", default=""
    )
    platform_properties: dict[str, PlatformPropertySpec] = doc(
        "Properties this worker offers (cpu_count and memory_kb are filled from resources "
        "when absent).",
        default_factory=dict,
    )
    additional_environment: dict[str, EnvironmentSource] = doc(
        "Variables added to every action's environment.", default_factory=dict
    )
    default_path: str = doc(
        "PATH given to actions whose Command sets none (Buck2 sends none).",
        default="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    )
    symlink_policy: Literal["reject", "allow"] = doc(
        "Input or output symlinks that are absolute or whose resolution leaves the "
        "action's input root (judged as the kernel resolves them: chains, links "
        'followed by "..").',
        default="reject",
    )
    containment: Literal["strongest", "strict", "pidns", "userns", "portable"] = doc(
        "How everything an action starts is kept from outliving it (docs/security.md): "
        '"pidns" = a PID namespace per action (needs CAP_SYS_ADMIN, e.g. root); '
        '"userns" = the same without privileges, inside a user namespace (util-linux '
        'unshare); "portable" = process group, lre as subreaper and a sweep of orphans; '
        '"strongest" = the first of these that works on this machine (tried at start-up); '
        '"strict" = the first of pidns and userns that works, refusing to start when the '
        "kernel refuses both (instead of running with portable).",
        default="strongest",
    )
    network: Literal["allow", "block"] = doc(
        'Network of actions: "block" runs each in a network namespace of its own with '
        "only loopback (needs containment pidns). Per action, the platform properties "
        "block-network and requires-network override it.",
        default="allow",
    )
    max_processes: int = doc(
        "Processes and threads one action may run at once; a fork past it fails (EAGAIN) "
        "and the action fails naming this key. Enforced at fork time by a pids cgroup per "
        "action where lre may make one (root, cgroup v1), else by RLIMIT_NPROC inside the "
        "action's user namespace (containment userns); docs/troubleshooting.md. 0 = no limit.",
        default=4096,
    )
    private_tmp: bool = doc(
        "Give each action its own temporary directory (TMPDIR, TMP and TEMP point into "
        "its action directory unless the Command sets them); removed with the action.",
        default=True,
    )
    sandbox_view: bool = doc(
        "Run each action in a view of its own where the containment can make one (pidns): "
        "the host read-only, lre's directories hidden, inputs behind an overlay, private "
        "/tmp, /dev/shm and /proc (docs/security.md). false = the host as lre sees it.",
        default=True,
    )
    sandbox_writable_paths: tuple[str, ...] = doc(
        "Host directories every action's view shows writable (like Bazel's "
        "--sandbox_writable_path, e.g. a ccache directory); per action also the platform "
        "property sandbox-writable-path (absolute paths separated by ':'). None may be "
        "or lie inside one of lre's own directories.",
        default=(),
    )
    sandbox_debug: bool = doc(
        "Keep the directory and the view of every failed action (non-zero exit, signal or "
        "timeout) and log how to enter them (docs/troubleshooting.md); per action also the "
        "platform property sandbox-debug. Kept directories are removed at the next start.",
        default=False,
    )
    upload_action_result: UploadActionResultSpec = doc(
        "Action cache writes.", default_factory=UploadActionResultSpec
    )
    jobserver: JobserverSpec = doc("GNU make jobserver per action.", default_factory=JobserverSpec)
    resources: ResourceSpec = doc(
        "CPU and memory reservations, sampling and the memory ladder.",
        default_factory=ResourceSpec,
    )
    limits: ActionLimitsSpec = doc(
        "Bounds on one action's trees and outputs (docs/troubleshooting.md).",
        default_factory=ActionLimitsSpec,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSpec:
    ONE_OF: ClassVar[tuple[str, ...]] = ("local",)
    local: LocalWorkerSpec | None = doc("A worker inside the lre process.", default=None)


# ------------------------------------------------------------------ servers


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsServerSpec:
    cert_file: str = doc("PEM server certificate.")
    key_file: str = doc("PEM key of cert_file.")
    client_ca_file: str = doc(
        "PEM CA for client certificates; set to require mutual TLS.", default=""
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ListenerSpec:
    address: str = doc(
        '"host:port" to listen on (port 1-65535, or 0 for any free port; `lre up --port` '
        'replaces the first server\'s), or "unix:/path" for a Unix socket (mode 0600).',
        default="127.0.0.1:50051",
    )
    tls: TlsServerSpec | None = doc(
        "TLS; required (or auth_token_file) off loopback.", default=None
    )
    auth_token_file: str = doc(
        'File holding a bearer token clients must send as "authorization: Bearer <token>"; '
        "the client config lre writes carries it (file mode 0600).",
        default="",
    )
    max_message_bytes: ByteSize = doc(
        "Largest gRPC message received or sent.", default=ByteSize(64 << 20)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceSpec:
    instance_name: str = doc(
        'Instance name clients send; "*" matches any name not listed elsewhere.', default="*"
    )
    cas_store: str = doc("Store serving CAS and ByteStream.")
    ac_store: str = doc("Store serving the action cache.", default="")
    scheduler: str = doc("Scheduler for Execute (empty = execution disabled).", default="")
    ac_read_only: bool = doc("Refuse UpdateActionResult.", default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSpec:
    name: str = doc("Server name (logs).", default="main")
    listener: ListenerSpec = doc("Where clients connect.", default_factory=ListenerSpec)
    instances: tuple[InstanceSpec, ...] = doc("Instance names served and their backends.")
    max_batch_total_size_bytes: ByteSize = doc(
        "Advertised batch limit; kept well below max_message_bytes.",
        default=ByteSize(4_000_000),
    )


# ------------------------------------------------------------------ global


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusSpec:
    address: str = doc(
        "HTTP listener for /status, /metrics and /api/v1/stats (port 1-65535, or 0 for any "
        'free port); "" disables it. When `lre up --port P` finds this port taken, it moves '
        "to P+10, else to any free port; `lre status` prints where it is.",
        default="127.0.0.1:50061",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class HistorySpec:
    enabled: bool = doc(
        "Record every finished action in the state dir (lre history, builds, trace, report).",
        default=True,
    )
    max_bytes: ByteSize = doc(
        "Bound of the history on disk (two rotating files of half this each; the oldest "
        "actions go first). About 500 bytes per action.",
        default=ByteSize(64 << 20),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class GlobalSpec:
    state_dir: str = doc(
        "lre's own state: pid file, logs, learned reservations.",
        default="${LRE_HOME:-${XDG_STATE_HOME:-${HOME}/.local/state}/lre}",
    )
    max_open_files: int = doc("Raise the soft RLIMIT_NOFILE to this at start.", default=24576)
    log_level: Literal["debug", "info", "warning", "error"] = doc(
        "Lowest level logged.", default="info"
    )
    status: StatusSpec = doc("HTTP status and metrics listener.", default_factory=StatusSpec)
    history: HistorySpec = doc("The action history in the state dir.", default_factory=HistorySpec)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSpec:
    exec_properties: dict[str, str] | None = doc(
        "Platform properties the client config `lre up` writes sends with every action. "
        "null = none: actions keep the platform the repository's own flags give them (what "
        "lre needs to run them it adds on the server side), so a laptop's action digests "
        "equal CI's. Set it only to what the team's own clients send as well.",
        default=None,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    stores: tuple[StoreSpec, ...] = doc("Blob stores and action caches.")
    servers: tuple[ServerSpec, ...] = doc("gRPC listeners.")
    schedulers: tuple[SchedulerSpec, ...] = doc("Schedulers.", default=())
    workers: tuple[WorkerSpec, ...] = doc("Workers running in this process.", default=())
    global_: GlobalSpec = doc(
        'Process-wide settings (JSON key "global").', default_factory=GlobalSpec
    )
    client: ClientSpec = doc(
        "What the client config written by `lre up` sends.", default_factory=ClientSpec
    )

    #: JSON keys that differ from the Python field name.
    KEY_ALIASES: ClassVar[dict[str, str]] = {"global": "global_"}
