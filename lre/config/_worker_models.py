"""Config models of the ``workers`` section: one class per JSON5 object.

Conventions in ``_model_fields``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import ClassVar, Literal

from lre.config._model_fields import ByteSize, Seconds, doc
from lre.config._scheduler_models import SchedulerResourceSpec


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


#: Resource settings the scheduler acts on: every field of ``SchedulerResourceSpec``.
_MOVED_TO_SCHEDULER = tuple(f.name for f in fields(SchedulerResourceSpec))


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceSpec:
    #: Settings the scheduler acts on, refused here with their new place.
    RETIRED_KEYS: ClassVar[Mapping[str, str]] = {
        key: f"moved to schedulers[].simple.resources.{key} (of the simple scheduler "
        "this worker takes actions from)"
        for key in _MOVED_TO_SCHEDULER
    }

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
    sample_interval: Seconds = doc(
        "How often running actions' process trees are sampled.", default=Seconds(0.25)
    )
    pressure_sample_interval: Seconds = doc(
        "Sampling interval while memory is short (or an action is frozen).",
        default=Seconds(0.05),
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
    max_open_files: int = doc(
        "Open files (RLIMIT_NOFILE, soft and hard) each process of an action may hold, "
        "instead of lre's own raised limit (global.max_open_files), capped by lre's hard "
        'limit; an open past it fails with EMFILE ("Too many open files") in the '
        "action. Set before the command runs under pidns with a view and under userns "
        "run by an unprivileged lre; elsewhere on the action's first process as it "
        "starts (docs/security.md). 0 = lre's own limit.",
        default=16384,
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
    action_user: str = doc(
        "Who an action's processes run as when lre runs as root (docs/security.md): "
        '"root" (the default) = lre\'s own user (in a pidns view: uid 0 with only CHOWN, '
        "DAC_OVERRIDE, FOWNER, FSETID, KILL, SETUID, SETGID, NET_BIND_SERVICE, SYS_CHROOT "
        "and AUDIT_WRITE, a read-only /proc, its own /dev and nosuid,nodev mounts); "
        '"unprivileged" = nobody, with no supplementary groups and no capabilities, where '
        "actions get a view of their own (containment pidns with sandbox_view), lre's own "
        "user elsewhere; its inputs show as its own (an idmapped lower layer, where the "
        "kernel allows; a write, chmod or hardlink lands in its copy); a user name, uid or "
        "uid:gid = that user (root only, and only with a view). Checked at start-up, with "
        "the sandbox_writable_paths it must reach.",
        default="root",
    )
    sandbox_writable_paths: tuple[str, ...] = doc(
        "Host directories every action's view shows writable (like Bazel's "
        "--sandbox_writable_path, e.g. a ccache directory): the only host paths an action "
        "may write. The platform property sandbox-writable-path (absolute paths separated "
        "by ':') may only name paths at or below these (else INVALID_ARGUMENT). Each is "
        "opened with no symlink in any component and judged by device and inode, at "
        "start-up and for every view: none may be or lie inside lre's own directories, "
        "lre's installation (its Python, site-packages, the lre package) or the home of "
        "lre's user, nor contain the installation or the home (docs/security.md).",
        default=(),
    )
    sandbox_visible_sockets: tuple[str, ...] = doc(
        "Host sockets every action's view shows although it hides their directory "
        "(docs/security.md: views hide the sockets of tmux, screen, systemd, D-Bus and "
        "container engines, which run commands for whoever connects): absolute paths, "
        "bound read-only at their own paths, e.g. an ssh agent for a fetch: "
        '["${SSH_AUTH_SOCK}"]. The action can make that server do anything it does for '
        "lre's user. None may be, lie in or hold one of lre's own directories.",
        default=(),
    )
    sandbox_tmpfs_size: ByteSize | Literal["auto"] = doc(
        "Size bound of an action's private /tmp and /dev/shm and of what it writes into its "
        "input root, outputs included, together (one tmpfs of its own, in views only); what "
        "is kept there counts as the action's memory for "
        'freezing, killing, the ladder and learning. "auto" = the hard ceiling (top ladder '
        "step x its scheduler's kill_factor, above which the action is killed anyway), or "
        "half of RAM when there is none.",
        default="auto",
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
        "CPU and memory this worker offers, sampling and memory control (reservations "
        "and the memory ladder are its scheduler's: schedulers[].simple.resources).",
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
