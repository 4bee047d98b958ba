"""One leased action, end to end, in four named phases.

``ActionRunner.run(lease)`` takes an action directory and runs:

1. *stage* (``_stage``): the Command prepared, the input tree read and
   staged (hardlinked from a filesystem CAS where it can), the view chosen;
2. *execute* (``_execute``): the process run to its end under the worker's
   containment, jobserver, sampler and memory control, its linked inputs
   journaled meanwhile and checked afterwards on every path;
3. *collect* (``_collect``): outputs and logs read and put in the CAS;
4. *record* (``_record``): the ``ActionResult`` with its metadata, written
   to the action cache per the worker's policy.

It never raises for problems of the action or of lre; it returns the
``Outcome`` to report:

- ``Completed`` when the action ran (any exit code; ``DeadlineExceeded``
  with the partial result on timeout), and also when the request itself is
  unusable (invalid names, missing blobs, a symlink the policy refuses):
  those end the operation with that error and are not retried.
- ``MemoryExceeded`` when the memory control killed it: memory was short
  (requeued one ladder step up) or it passed the hard ceiling (final). A kill
  that ends the operation (final, or the lease's ``last_chance``) carries the
  killed run's result: exit code 137, its logs with lre's explanation appended
  to stderr (``_doomed``), never cached.
- ``InfrastructureFailure`` when lre failed (disk full, unexpected errors)
  or the lease was cancelled.

Only ``trio.Cancelled`` from an enclosing scope (worker shutdown) propagates,
after the process group is killed and reaped.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import trio

from lre.cas import DirectoryReader, TreeExtent
from lre.config import LocalWorkerSpec
from lre.digest import EMPTY_DIGEST, Digest
from lre.errors import (
    Cancelled,
    DeadlineExceeded,
    Internal,
    LreError,
    MissingBlobs,
)
from lre.proto import re_pb2
from lre.scheduler import (
    Completed,
    InfrastructureFailure,
    Lease,
    MemoryExceeded,
    Outcome,
    Usage,
)
from lre.worker._action_result import ActionResultWriter, action_result, cache_result
from lre.worker._attempt import Attempt
from lre.worker._cas_handle import CasHandle
from lre.worker._idmap import idmap_views
from lre.worker._metadata import Timeline, resource_usage_any
from lre.worker._view_policy import ViewOf, ViewPolicy, blocks_network
from lre.worker.containment import ActionIdentity, Containment
from lre.worker.directories import (
    TMP_NAME,
    ActionDirectories,
    WorkDirectory,
    request_error,
)
from lre.worker.inputs import (
    SMALL_CHECK,
    InputJournal,
    InputTree,
    LinkedInputs,
    altered_inputs,
    fetch_input_tree,
    stage_inputs,
)
from lre.worker.memory import MemoryCeiling, MemoryControl, doomed_explanation, memory_figure
from lre.worker.outputs import (
    ActionLimits,
    FoundFile,
    FoundOutputs,
    OutputPolicy,
    OutputRequest,
    collect_outputs,
    open_own_log,
    unshared_adopter,
    upload_outputs,
)
from lre.worker.process import (
    ActionJobservers,
    JobserverPool,
    PreparedCommand,
    ProcessOutcome,
    SpawnRequest,
    default_containment,
    limit_error,
    prepare_command,
    process_limits,
    run_process,
)
from lre.worker.usage import ActionUsage, ProcessTreeSampler
from lre.worker.view import WritableRefused

__all__ = ["ActionResultWriter", "ActionRunner", "RunnerContext"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Staged:
    """What the stage phase leaves for the others."""

    prepared: PreparedCommand
    #: The action's view (None: it sees the host as lre does).
    view: ViewOf | None
    #: Inputs hardlinked from the CAS that the action could alter (none in a
    #: view: there the inputs sit in an overlay's lower layer, which nothing
    #: of the action can write).
    linked: LinkedInputs


@dataclass(frozen=True, slots=True)
class _Executed:
    """What the execute phase leaves for the others."""

    process: ProcessOutcome
    usage: Usage
    #: Passes of the sampler over the action's processes (0: none).
    samples: int


_NO_CEILING = MemoryCeiling(0, False, 1.0)


@dataclass(frozen=True, slots=True)
class RunnerContext:
    """What a worker hands its ``ActionRunner``: the parts it shares with it.

    ``cas`` is the store inputs are read from and outputs written to, with
    what a filesystem store adds (``CasHandle``: hardlinked inputs, adopted
    outputs, altered inputs discarded). ``action_cache`` receives results per
    the worker's policy. ``max_inflight``: the worker's actions at once (0 =
    unlimited), which sizes the stock of ready action directories. A field
    left None is the runner's own default (see ``ActionRunner``).
    """

    spec: LocalWorkerSpec
    workdir: WorkDirectory
    cas: CasHandle
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


class ActionRunner:
    """Runs leased actions for one worker, with the parts of ``context``
    (``tainted_inputs`` counts the linked inputs found altered, see
    ``_input_guard``)."""

    def __init__(self, context: RunnerContext) -> None:
        spec, workdir, cas, identity = context.spec, context.workdir, context.cas, context.identity
        limits, containment = context.limits, context.containment
        self.spec = spec
        self.identity = identity
        owner = identity.owner if identity is not None else None
        self.memory = context.memory
        self.ceiling = context.ceiling
        #: Bounds on each action's trees and outputs; input subtrees measured.
        self.limits = limits if limits is not None else ActionLimits.of(spec.limits, None)
        self._extents: dict[tuple[str, int], TreeExtent] = {}
        self.containment = containment if containment is not None else default_containment()
        #: Each action's view (None: it sees the host as lre does).
        self.view_policy = ViewPolicy.for_worker(
            spec,
            self.containment,
            workdir,
            cas.store,
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
        self.cas = cas
        self.action_cache = context.action_cache
        #: moves an output into the CAS only when no other process holds it
        self.adopt = unshared_adopter(cas.adopt, cas.store) if cas.adopt is not None else None
        #: Linked inputs found altered by their action (and discarded).
        self.tainted_inputs = 0
        self.allow_escaping_symlinks = spec.symlink_policy == "allow"
        uid = identity.uid if identity is not None else None
        self.output_policy = OutputPolicy(self.limits, self.allow_escaping_symlinks, uid)
        self.sampler = context.sampler
        self.directories = ActionDirectories(
            workdir, stock=min(128, 2 * context.max_inflight or 64), owner=owner
        )
        tree_reader = context.directories
        self._tree_reader = tree_reader if tree_reader is not None else DirectoryReader(cas.store)
        #: The jobserver pools of running actions.
        self.jobservers = ActionJobservers(spec, workdir.path, owner=owner)
        #: lease id -> its attempt running now
        self._attempts: dict[str, Attempt] = {}

    def jobserver_tokens(self) -> tuple[int, int]:
        """``(in_use, total)`` tokens over the private pools of running actions."""
        return self.jobservers.tokens()

    def close(self) -> None:
        """Release the shared empty jobserver pool and the inputs' mapping
        (call when no action runs)."""
        self.jobservers.close()
        if self.input_idmap is not None:
            self.input_idmap.close()

    def over_limit(self, usage: ActionUsage) -> None:
        """Sampler hook: an action passed the hard ceiling; kill it (final)."""
        self.memory_kill(usage.action_id, "it passed the hard memory ceiling", True)

    def memory_kill(self, action_id: str, reason: str, final: bool) -> None:
        """Kill the action's whole tree now (frozen or not); its run then ends
        with ``MemoryExceeded`` (``final``: not retried). Unknown ids are ignored."""
        attempt = self._attempts.get(action_id)
        if attempt is not None and attempt.group is not None:
            log.debug("worker %s: killing %s: %s", self.spec.name, action_id, reason)
            attempt.kill(reason, final, self.containment, self.sampler)

    async def run(self, lease: Lease) -> Outcome:
        """Run one attempt of ``lease``'s action and return its outcome."""
        timeline = Timeline(queued=lease.queued_at)
        timeline.mark("worker_start")
        attempt = Attempt(lease, await self.directories.take(), timeline)
        self._attempts[lease.lease_id] = attempt
        try:
            with trio.CancelScope() as scope:
                lease.on_cancel(scope.cancel)
                return await self._run(attempt)
            return InfrastructureFailure(
                Cancelled(
                    f"operation {lease.operation_name}: cancelled "
                    f"({lease.cancel_signal.reason or 'no reason given'})"
                )
            )
        except LreError as error:
            return self._failed(lease, timeline, error)
        except WritableRefused as refusal:  # found where the view was built
            assert self.view_policy is not None
            return self._failed(lease, timeline, self.view_policy.refused(lease.platform, refusal))
        except (OSError, ExceptionGroup) as error:
            known = request_error(error, self.spec.name, lease.operation_name)  # disk full
            if known is not None:
                return self._failed(lease, timeline, known)
            if isinstance(error, ExceptionGroup):
                raise
            log.exception("worker %s: action %s failed", self.spec.name, lease.operation_name)
            return InfrastructureFailure(
                Internal(f"worker {self.spec.name}: {error.strerror or error}")
            )
        except Exception as error:  # a defect met by one action ends that action only
            failure = Internal(f"worker {self.spec.name}: lre failed on this action: {error!r}")
            return self._failed(lease, timeline, failure)  # logged there, with the trace
        finally:
            self._attempts.pop(lease.lease_id, None)
            held = attempt.view_held
            if attempt.kept:
                if held is not None:
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(os.close, held)
            else:
                await self.directories.release(
                    attempt.action_dir, reusable=attempt.reusable, view=held
                )

    def _failed(self, lease: Lease, timeline: Timeline, error: LreError) -> Outcome:
        """A request lre cannot run: final, with metadata; logged (INFO if expected)."""
        level = logging.INFO if isinstance(error, MissingBlobs) else logging.WARNING
        name, trace = lease.operation_name, isinstance(error, Internal)
        log.log(level, "worker %s: %s failed: %s", self.spec.name, name, error, exc_info=trace)
        timeline.mark("worker_completed")
        result = re_pb2.ActionResult(execution_metadata=timeline.to_proto(self.spec.name))
        return Completed(result, error=error, message=error.message)

    async def _run(self, attempt: Attempt) -> Outcome:
        """The four phases in order; an action killed for memory or refused a
        fork ends after *execute*, with no outputs collected (a kill that ends
        the operation with its logs only: ``_doomed``)."""
        staged = await self._stage(attempt)
        executed = await self._execute(attempt, staged)
        stopped = self._stopped(attempt, executed)
        if isinstance(stopped, MemoryExceeded) and (stopped.final or attempt.lease.last_chance):
            return await self._doomed(attempt, staged, executed, stopped)
        if stopped is not None:
            return stopped
        found, logs = await self._collect(attempt, staged, executed.process)
        return await self._record(attempt, found, logs, executed)

    async def _stage(self, attempt: Attempt) -> _Staged:
        """Stage phase: the Command prepared, the input tree read and staged
        into ``action_dir`` (its blobs pinned meanwhile), the view chosen.

        Raises ``LreError`` subclasses for an unusable request (invalid
        names, missing blobs, a symlink the policy refuses, limits passed)
        and ``OSError`` when the filesystem fails.
        """
        lease, action_dir = attempt.lease, attempt.action_dir
        root = action_dir.root
        attempt.timeline.mark("input_fetch_start")
        prepared = prepare_command(
            lease.command,
            entrypoint=self.spec.entrypoint,
            additional_environment=self.spec.additional_environment,
            platform=lease.platform,
            timeout_s=lease.timeout_s,
            input_root=root,
            default_path=self.spec.default_path,
        )
        if self.spec.private_tmp:
            for name in ("TMPDIR", "TMP", "TEMP"):
                prepared.env.setdefault(name, str(action_dir.tmp))
        input_root = Digest.from_proto(
            lease.action.input_root_digest, field="Action.input_root_digest"
        )
        if input_root == EMPTY_DIGEST:  # an empty Directory serialises to no bytes
            tree = InputTree()
        else:
            tree = await fetch_input_tree(
                self._tree_reader,
                input_root,
                allow_escaping_symlinks=self.allow_escaping_symlinks,
                limits=self.limits,
                extents=self._extents,
            )
        parents = [request.relative for request in prepared.outputs]
        if prepared.working_directory:
            parents.append(prepared.working_directory + "/.")
        pin = self.cas.pin if tree.files else None
        held = pin([f.digest for f in tree.files]) if pin is not None else None
        try:
            staged = await stage_inputs(
                self.cas.store,
                tree,
                root,
                output_parents=parents,
                link_source=self.cas.link_source,
                link_now=self.cas.link_now,
                existing=action_dir.existing,
                # Under the mapping lre's directories show as the action's.
                owner=None if self.input_idmap is not None else self.directories.owner,
            )
        finally:
            if held is not None:
                held.release()
        attempt.timeline.mark("input_fetch_completed")
        view = (
            self.view_policy.view_for(lease.platform, action_dir)
            if self.view_policy is not None
            else None
        )
        return _Staged(prepared, view, staged.links if view is None else {})

    async def _execute(self, attempt: Attempt, staged: _Staged) -> _Executed:
        """Execute phase: the process run to its end (``_spawn``), its linked
        inputs journaled while it runs; then, however it ended (an error and
        cancellation included), the inputs it altered withdrawn and the
        journal entry closed. Errors of the run propagate after that."""
        linked = staged.linked
        token = None
        if linked and self.journal is not None:
            token = self.journal.started(linked)
        # Whether nothing the action started can still run. Until the run
        # returned (an error or a cancellation ended and reaped the process),
        # that is known only to a backend that always ends actions alone.
        alone = self.containment.ends_alone
        try:
            process, sampled = await self._spawn(attempt, staged)
            alone = process.ended_alone
        finally:
            # Unless alone, something of the action may still write: its
            # linked inputs are withdrawn, its outputs copied rather than
            # moved (``_collect``), and its directory removed.
            if not alone:
                attempt.reusable = False
            if linked:
                with trio.CancelScope(shield=True):
                    await self._check_inputs(attempt.lease, linked, all_altered=not alone)
            if token is not None and self.journal is not None:
                self.journal.ended(token)
        peak, source = memory_figure(process, sampled)
        cpu_seconds = process.cpu_seconds
        samples = 0
        if sampled is not None and sampled.samples:
            cpu_seconds = max(cpu_seconds, sampled.cpu_seconds)
            samples = sampled.samples
        frozen_s = attempt.frozen_s
        usage = Usage(
            peak_rss_bytes=peak,
            cpu_seconds=cpu_seconds,
            wall_seconds=max(0.0, process.ended_at - process.started_at - frozen_s),
            frozen_seconds=frozen_s,
            memory_source=source,
        )
        return _Executed(process, usage, samples)

    def _stopped(self, attempt: Attempt, executed: _Executed) -> Outcome | None:
        """The outcome of an action lre stopped (killed for memory, a fork
        refused by ``max_processes``), None for one that ended by itself."""
        kill, lease = attempt.killed, attempt.lease
        if kill is not None:
            killed_peak = kill.usage.peak_memory_bytes if kill.usage is not None else 0
            peak = max(killed_peak, executed.usage.peak_rss_bytes)
            return MemoryExceeded(peak, usage=executed.usage, reason=kill.reason, final=kill.final)
        if attempt.process_limited:
            limited = limit_error(self.spec.name, lease.operation_name, self.spec.max_processes)
            return self._failed(lease, attempt.timeline, limited)
        return None

    async def _doomed(
        self, attempt: Attempt, staged: _Staged, executed: _Executed, killed: MemoryExceeded
    ) -> Outcome:
        """``killed`` with the killed run's result: exit code 137, stdout and
        stderr with lre's explanation (``doomed_explanation``) appended, its
        timeline and usage; no outputs, never cached. When the logs cannot be
        read or stored (a full disk), ``killed`` as it is (the operation then
        ends with RESOURCE_EXHAUSTED), logged."""
        lease, action_dir, timeline = attempt.lease, attempt.action_dir, attempt.timeline
        text = doomed_explanation(lease, killed, self.ceiling)
        try:
            _append_to_log(action_dir.stderr, executed.process.log_files[1], text)
            timeline.mark("output_upload_start")
            found, logs = await self._read_outputs(attempt, staged.view, [], executed.process)
            await upload_outputs(self.cas.store, logs, found.blobs, adopt=None)
        except (LreError, OSError) as error:
            log.warning(
                "worker %s: the logs of %s, killed for its memory, could not be kept: %s",
                self.spec.name,
                lease.operation_name,
                error,
            )
            return killed
        timeline.mark("output_upload_completed")
        result = action_result(
            lease,
            found,
            logs,
            executed.process,
            max_inline_bytes=self.spec.upload_action_result.max_inline_bytes,
        )
        result.exit_code = 128 + signal.SIGKILL
        self._finish_metadata(result, attempt, executed, killed.peak_rss_bytes)
        return dataclasses.replace(killed, result=result)

    def _finish_metadata(
        self, result: re_pb2.ActionResult, attempt: Attempt, executed: _Executed, peak_rss: int
    ) -> None:
        """Close ``result``'s timeline and attach the run's resource usage
        (``peak_rss``: the figure this outcome reports, bytes)."""
        lease = attempt.lease
        attempt.timeline.mark("worker_completed")
        result.execution_metadata.CopyFrom(attempt.timeline.to_proto(self.spec.name))
        result.execution_metadata.auxiliary_metadata.append(
            resource_usage_any(
                peak_rss_bytes=peak_rss,
                cpu_seconds=executed.usage.cpu_seconds,
                reserved_millicpus=lease.reservation.millicpus,
                reserved_memory_bytes=lease.reservation.memory_bytes,
                ladder_step=lease.ladder_step,
                attempt=lease.attempt,
                samples=executed.samples,
            )
        )

    async def _collect(
        self, attempt: Attempt, staged: _Staged, process: ProcessOutcome
    ) -> tuple[FoundOutputs, list[FoundFile]]:
        """Collect phase: a failed action's directory kept when debugging asks
        for it, its outputs and logs read and put in the CAS (moved where the
        store adopts files and nothing of the action runs any more).

        Raises ``LreError`` subclasses for outputs the policy, the limits or
        the store refuse and ``OSError`` when the filesystem fails.
        """
        view, lease, action_dir = staged.view, attempt.lease, attempt.action_dir
        if self.view_policy is not None and self.view_policy.keeps(lease.platform, process):
            # Never recycled (so never released); the next start removes it.
            attempt.reusable, attempt.kept = False, True
            self.view_policy.log_kept(self.spec.name, lease.operation_name, action_dir, process)
        attempt.timeline.mark("output_upload_start")
        found, logs = await self._read_outputs(attempt, view, staged.prepared.outputs, process)
        all_files = [f for _, f in found.files] + found.tree_files + logs
        adopt = self.adopt if process.ended_alone else None
        await upload_outputs(self.cas.store, all_files, found.blobs, adopt=adopt)
        attempt.timeline.mark("output_upload_completed")
        return found, logs

    async def _read_outputs(
        self,
        attempt: Attempt,
        view: ViewOf | None,
        outputs: list[OutputRequest],
        process: ProcessOutcome,
    ) -> tuple[FoundOutputs, list[FoundFile]]:
        """``collect_outputs`` of the attempt's directory: in a view, what the
        action wrote is in the overlay's upper layer, over the staged tree;
        outputs are read from both, merged."""
        directory = attempt.action_dir
        return await collect_outputs(
            self.workdir,
            directory.root if view is None else directory.upper,
            None if view is None else directory.root,
            "trusted" if view is None else view.xattrs,
            outputs,
            (directory.stdout, directory.stderr),
            process.log_files,
            self.output_policy,
        )

    async def _record(
        self, attempt: Attempt, found: FoundOutputs, logs: list[FoundFile], executed: _Executed
    ) -> Outcome:
        """Record phase: the result with its execution metadata, cached per
        the worker's policy (a cache that refuses it is logged, never fatal)."""
        process, lease = executed.process, attempt.lease
        result = action_result(
            lease,
            found,
            logs,
            process,
            max_inline_bytes=self.spec.upload_action_result.max_inline_bytes,
        )
        error: LreError | None = None
        message = ""
        if process.timed_out:
            error = DeadlineExceeded(
                f"action timed out after {lease.timeout_s:g} s (stdout/stderr are partial)"
            )
            message = error.message
        elif process.signal is not None:
            message = f"action {process.describe}"
        self._finish_metadata(result, attempt, executed, executed.usage.peak_rss_bytes)
        await cache_result(self.action_cache, self.spec, lease, result, error)
        return Completed(
            result,
            error=error,
            message=message,
            usage=executed.usage,
            oom_killed=process.oom_killed,
        )

    async def _check_inputs(
        self, lease: Lease, linked: LinkedInputs, *, all_altered: bool = False
    ) -> None:
        """Discard every linked input blob the action altered (see
        ``_input_guard``) before anything of the action is reported; with
        ``all_altered`` (a process of the action may still run) every one.

        Errors of the check or of the discard propagate (an infrastructure
        failure of this attempt); the blob has left the index by then.
        """
        if all_altered:
            altered = list(linked)
        elif len(linked) <= SMALL_CHECK:
            altered = altered_inputs(linked)
        else:
            altered = await trio.to_thread.run_sync(altered_inputs, linked)
        for digest, executable in altered:
            self.tainted_inputs += 1
            log.warning(
                "worker %s: action %s altered its hardlinked input %s (%s); "
                "the CAS copy is discarded and must be uploaded again",
                self.spec.name,
                lease.operation_name,
                digest,
                "executable" if executable else "plain",
            )
            if self.cas.discard is not None:
                await self.cas.discard(digest, executable)

    async def _spawn(
        self, attempt: Attempt, staged: _Staged
    ) -> tuple[ProcessOutcome, ActionUsage | None]:
        """Run the process under the worker's jobserver, sampler and memory
        control, and end its registrations with them however it ended."""
        lease, action_dir, timeline = attempt.lease, attempt.action_dir, attempt.timeline
        prepared = staged.prepared
        env = prepared.env
        lease_id = lease.lease_id
        pool: JobserverPool | None = None
        shared = False
        if self.spec.jobserver.enabled:
            pool, shared = self.jobservers.take(lease, str(action_dir.stdout.parent / TMP_NAME))
            env = pool.environment(env)
        # With the jobserver disabled the Command's own MAKEFLAGS & co. pass
        # through untouched (lre configured unbounded).

        def started(pid: int) -> None:
            attempt.group = pid
            if self.sampler is not None:
                self.sampler.register(
                    lease_id,
                    pid,
                    kill_line_bytes=self.ceiling.ceiling_bytes,
                    private_tmpfs=staged.view is not None,
                    helpers=self.containment.helper_processes,
                )
            if self.memory is not None:
                self.memory.started(lease_id, pid, lease.reservation.memory_bytes)

        memory = self.memory

        try:
            timeline.mark("execution_start")
            process = await run_process(
                SpawnRequest(
                    prepared.argv,
                    cwd=prepared.cwd(action_dir.root),
                    env=env,
                    stdout_path=action_dir.stdout,
                    stderr_path=action_dir.stderr,
                    timeout=lease.timeout_s,
                    kill_grace=self.spec.kill_grace_s,
                    pass_fds=pool.pass_fds if pool is not None else (),
                    on_started=started,
                    nice=self.spec.nice,
                    containment=self.containment,
                    block_network=blocks_network(lease.platform, self.spec.network == "block"),
                    view=staged.view,
                    max_processes=self.spec.max_processes,
                    max_open_files=self.spec.max_open_files,
                    paused_seconds=(
                        (lambda: memory.frozen_seconds(lease_id)) if memory is not None else None
                    ),
                    end_frozen=(
                        (lambda: memory.end_frozen(lease_id)) if memory is not None else None
                    ),
                    identity=self.identity,
                    on_view_held=lambda fd: setattr(attempt, "view_held", fd),
                )
            )
            timeline.mark("execution_completed")
        finally:
            if memory is not None:
                attempt.frozen_s = memory.ended(lease_id)
            first, attempt.group = attempt.group, None
            if first is not None and process_limits().ended(first):
                attempt.process_limited = True
            sampled = self.sampler.unregister(lease_id) if self.sampler is not None else None
            if pool is not None:
                self.jobservers.give_back(lease_id, pool, shared)
        return process, sampled


def _append_to_log(path: Path, identity: tuple[int, int], text: str) -> None:
    """Append ``text`` to the action's log at ``path``, the very file lre opened
    for it (``identity``: its device and inode). Raises ``InvalidArgument``
    when the action put another file (a symlink, a link elsewhere, a FIFO) in
    its place, ``OSError`` when the write fails."""
    fd, _ = open_own_log(path, identity, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
