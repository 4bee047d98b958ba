"""What a worker hands its ``ActionRunner`` (``RunnerContext``), and what
every attempt on that worker then shares (``RunnerParts``).

The store is taken as it is: what it offers beyond reads and writes comes
from its ``capabilities()``, asked once here. Where its blobs are files on
this machine (``local_files``) inputs are hardlinked from it, outputs moved
into it and inputs an action altered discarded; where it can ``pin``, an
input tree's blobs are held while they are staged. A store with neither
(a memory or a remote store) is read and written with its three calls only.
"""

from __future__ import annotations

from dataclasses import dataclass

from lre.cas import BlobStore, DirectoryReader, TreeExtent
from lre.config import LocalWorkerSpec
from lre.worker._action_result import ActionResultWriter
from lre.worker._idmap import idmap_views
from lre.worker._view_policy import ViewPolicy
from lre.worker.containment import ActionIdentity, Containment
from lre.worker.directories import ActionDirectories, WorkDirectory
from lre.worker.inputs import InputJournal
from lre.worker.memory import MemoryCeiling, MemoryControl
from lre.worker.outputs import ActionLimits, OutputPolicy, unshared_adopter
from lre.worker.process import ActionJobservers, default_containment
from lre.worker.usage import ProcessTreeSampler

_NO_CEILING = MemoryCeiling(0, False, 1.0)


@dataclass(frozen=True, slots=True)
class RunnerContext:
    """What a worker hands its ``ActionRunner``: the parts it shares with it.

    ``store`` is the store inputs are read from and outputs written to (see
    the module docstring). ``action_cache`` receives results per the
    worker's policy. ``max_inflight``: the worker's actions at once (0 =
    unlimited), which sizes the stock of ready action directories. A field
    left None is the runner's own default (see ``RunnerParts``).
    """

    spec: LocalWorkerSpec
    workdir: WorkDirectory
    store: BlobStore
    max_inflight: int = 1
    action_cache: ActionResultWriter | None = None
    sampler: ProcessTreeSampler | None = None
    containment: Containment | None = None
    #: Records linked inputs of running actions for crash recovery.
    journal: InputJournal | None = None
    #: Input Directory messages, each read and validated once (shared with
    #: the scheduler by the composition root; None: the runner's own).
    directories: DirectoryReader | None = None
    limits: ActionLimits | None = None
    #: lre's directories hidden from every action's view.
    hidden_paths: tuple[str, ...] = ()
    #: Freezes, thaws and kills actions when memory is short (None: never).
    memory: MemoryControl | None = None
    #: RSS above which an action is killed and fails at any time, and how
    #: that was worked out (told to an action killed for good).
    ceiling: MemoryCeiling = _NO_CEILING
    #: The user actions run as (None: lre's own; ``_identity.py``).
    identity: ActionIdentity | None = None
    #: The size of each view's /tmp and /dev/shm together (0: the view's
    #: default, ``_view.TMPFS_OPTIONS``).
    tmpfs_bytes: int = 0


class RunnerParts:
    """The parts of ``context`` every attempt uses, with the runner's own
    defaults filled in and what is built from them once per worker (the
    view policy, the stock of action directories, the jobserver pools)."""

    def __init__(self, context: RunnerContext) -> None:
        spec, workdir, store = context.spec, context.workdir, context.store
        identity = context.identity
        self.spec = spec
        self.identity = identity
        owner = identity.owner if identity is not None else None
        self.memory = context.memory
        self.ceiling = context.ceiling
        #: Bounds on each action's trees and outputs; input subtrees measured.
        self.limits = context.limits or ActionLimits.of(spec.limits, None)
        self.extents: dict[tuple[str, int], TreeExtent] = {}
        self.containment = context.containment or default_containment()
        #: Each action's view (None: it sees the host as lre does).
        self.view_policy = ViewPolicy.for_worker(
            spec,
            self.containment,
            workdir,
            store,
            context.hidden_paths,
            owner=owner,
            tmpfs_bytes=context.tmpfs_bytes,
        )
        #: lre's files shown as the action user's in its views (None: not so).
        self.input_idmap = (
            idmap_views(self.view_policy, spec.name, workdir.path) if self.view_policy else None
        )
        self.journal = context.journal
        self.workdir = workdir
        self.store = store
        capabilities = store.capabilities()
        #: The store's blobs as files here (None: only its three calls).
        self.local_files = capabilities.local_files
        self.pin = capabilities.pin
        self.action_cache = context.action_cache
        files = self.local_files
        #: moves an output into the CAS only when no other process holds it
        self.adopt = unshared_adopter(files.adopt_file, store) if files is not None else None
        uid = identity.uid if identity is not None else None
        self.output_policy = OutputPolicy(self.limits, spec.symlink_policy == "allow", uid)
        self.sampler = context.sampler
        self.directories = ActionDirectories(
            workdir,
            stock=min(128, 2 * context.max_inflight or 64),
            owner=owner,
            layers=self.view_policy,
        )
        tree_reader = context.directories
        self.tree_reader = tree_reader if tree_reader is not None else DirectoryReader(store)
        #: The jobserver pools of running actions.
        self.jobservers = ActionJobservers(spec, workdir.path, owner=owner)

    def close(self) -> None:
        """Release the shared empty jobserver pool and the inputs' mapping
        (call when no action runs)."""
        self.jobservers.close()
        if self.input_idmap is not None:
            self.input_idmap.close()
