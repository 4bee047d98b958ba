"""Config models of the ``schedulers`` section: one class per JSON5 object.

Conventions in ``_model_fields``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from lre.config._model_fields import ByteSize, Seconds, doc
from lre.config._store_models import EndpointSpec

PropertyType = Literal["minimum", "exact", "priority", "ignore"]


BuildKey = Literal["invocation", "correlated_invocations", "repository"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FairShareSpec:
    enabled: bool = doc(
        "Share the workers fairly between the builds queued at once (each active build gets "
        "an equal weighted share of the CPU and memory reserved; a lone build gets all). "
        "false = one queue for everyone, by priority and then arrival.",
        default=True,
    )
    build_key: BuildKey = doc(
        'What makes one build: "invocation" (RequestMetadata.tool_invocation_id: one '
        'bazel or buck2 command), "correlated_invocations" '
        "(RequestMetadata.correlated_invocations_id: e.g. every command of one CI job) or "
        '"repository" (the x-lre-repository header lre link writes). A request without '
        "that field falls back to its repository header, then to its gRPC connection.",
        default="invocation",
    )
    weights: dict[str, float] = doc(
        "Weight of each repository's builds (by its x-lre-repository name; others weigh "
        "1): a build of weight 2 gets twice the share of a build of weight 1 while both "
        "wait.",
        default_factory=dict,
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
class SchedulerResourceSpec:
    cold_memory: ByteSize = doc(
        "Memory reserved by an action of a kind never seen before.", default=ByteSize(512 << 20)
    )
    ladder: tuple[ByteSize, ...] = doc(
        "Memory reservations tried after successive kills under memory shortage.",
        default=(ByteSize(1 << 30), ByteSize(2 << 30), ByteSize(4 << 30), ByteSize(8 << 30)),
    )
    max_steps: int = doc(
        "Kills after which the action fails once (exit code 137, the reason at the end "
        "of its stderr; not run again).",
        default=5,
    )
    kill_factor: float = doc(
        "Hard ceiling of each worker = its top ladder step (its memory budget, else the "
        "last ladder entry) x this: an action whose RSS passes it is killed at any time "
        "and fails once (exit code 137, the reason at the end of its stderr; not run "
        "again). Below it, exceeding a reservation kills nothing.",
        default=1.2,
    )
    live_memory_veto: bool = doc(
        "Do not start an action while memory is short, or while the host's available "
        "memory minus the worker's memory_headroom is less than it reserves.",
        default=True,
    )
    learner: LearnerSpec = doc(
        "Learned reservations: one store per lre, with the settings of the first simple "
        "scheduler that learns; a scheduler whose learner is disabled consults none.",
        default_factory=LearnerSpec,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SimpleSchedulerSpec:
    supported_platform_properties: dict[str, PropertyType] = doc(
        'How each platform key matches: "minimum" (numeric, reserved while running), '
        '"exact", "priority" (worker must have it) or "ignore". An action naming a key '
        "not listed here fails at once. The estimates resources:cpu, resources:memory (MiB), "
        "EstimatedCPU, EstimatedMemory and EstimatedComputeUnits, when minimum, raise the CPU "
        "and memory reserved (capped at the largest worker) instead of being required "
        "(docs/resource-control.md).",
        default_factory=lambda: {
            "cpu_count": "minimum",
            "memory_kb": "minimum",
            "resources:cpu": "minimum",
            "resources:memory": "minimum",
            "EstimatedCPU": "minimum",
            "EstimatedMemory": "minimum",
            "EstimatedComputeUnits": "minimum",
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
    fair_share: FairShareSpec = doc(
        "How builds queued at the same time share the workers (docs/resource-control.md).",
        default_factory=FairShareSpec,
    )
    resources: SchedulerResourceSpec = doc(
        "Memory reservations of its actions, the memory ladder, the hard ceiling and "
        "learned reservations (docs/resource-control.md).",
        default_factory=SchedulerResourceSpec,
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
        "Keys removed from a forwarded action's platform. By default every resource key lre "
        "reads: its own (cpu_count, memory_kb) and the estimates (resources:cpu, "
        "resources:memory, EstimatedCPU, EstimatedMemory, EstimatedComputeUnits), which an "
        "engine that has not registered them refuses; list fewer for an upstream that reads "
        "the estimates.",
        default=(
            "cpu_count",
            "memory_kb",
            "resources:cpu",
            "resources:memory",
            "EstimatedCPU",
            "EstimatedMemory",
            "EstimatedComputeUnits",
        ),
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
