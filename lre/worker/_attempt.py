"""One attempt of a leased action on a worker: its state and its phases.

``ActionRunner`` makes an ``Attempt`` when it takes a lease and drops it
when the attempt has ended, composing its phases in order:

1. *stage* (``stage``): the Command prepared, the input tree read and
   staged (hardlinked from the store's local files where it can), the view
   chosen;
2. *execute* (``execute``): the process run to its end under the worker's
   containment, jobserver, sampler and memory control, its linked inputs
   journaled meanwhile and checked afterwards on every path;
3. *collect* (``collect``): outputs and logs read and put in the CAS;
4. *record* (``record``): the ``ActionResult`` with its metadata, written
   to the action cache per the worker's policy.

An action lre stopped (``stopped``: killed for memory, a fork refused) ends
after *execute*; one killed for good ends with its logs only (``doomed``).
Meanwhile the attempt keeps what happens to it (the process group while it
runs, the frozen time, a kill, whether its directory may be recycled or
must be kept); the memory control's kills are a call on it (``kill``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import trio

from lre.digest import EMPTY_DIGEST, Digest
from lre.errors import DeadlineExceeded, Internal, LreError, MissingBlobs
from lre.proto import re_pb2
from lre.scheduler import Completed, Lease, MemoryExceeded, Outcome, Usage
from lre.worker._action_result import action_result, cache_result
from lre.worker._metadata import Timeline, resource_usage_any
from lre.worker._runner_parts import RunnerParts
from lre.worker._view_policy import ViewOf, blocks_network
from lre.worker.directories import TMP_NAME, ActionDirectory
from lre.worker.inputs import (
    SMALL_CHECK,
    InputTree,
    LinkedInputs,
    altered_inputs,
    fetch_input_tree,
    stage_inputs,
)
from lre.worker.memory import doomed_explanation, memory_figure
from lre.worker.outputs import (
    FoundFile,
    FoundOutputs,
    OutputRequest,
    collect_outputs,
    open_own_log,
    upload_outputs,
)
from lre.worker.process import (
    JobserverPool,
    PreparedCommand,
    ProcessOutcome,
    SpawnRequest,
    limit_error,
    prepare_command,
    process_limits,
    run_process,
)
from lre.worker.usage import ActionUsage

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MemoryKill:
    """Why the memory control killed an attempt's action."""

    #: The sampler's figures of the action when it was killed (None: no sampler).
    usage: ActionUsage | None
    reason: str
    #: Not retried (the hard ceiling passed).
    final: bool


@dataclass(frozen=True, slots=True)
class Staged:
    """What the stage phase leaves for the others."""

    prepared: PreparedCommand
    #: The action's view (None: it sees the host as lre does).
    view: ViewOf | None
    #: Inputs hardlinked from the CAS that the action could alter (none in a
    #: view: there the inputs sit in an overlay's lower layer, which nothing
    #: of the action can write).
    linked: LinkedInputs


@dataclass(frozen=True, slots=True)
class Executed:
    """What the execute phase leaves for the others."""

    process: ProcessOutcome
    usage: Usage
    #: Passes of the sampler over the action's processes (0: none).
    samples: int


@dataclass(slots=True, eq=False)
class Attempt:
    """One leased action's run on this worker, from its directory taken to
    released, with the parts of its worker it runs with (``parts``)."""

    parts: RunnerParts
    lease: Lease
    action_dir: ActionDirectory
    timeline: Timeline
    #: The process group of the action while it runs (None: not running).
    group: int | None = None
    #: Set when the memory control killed it.
    killed: MemoryKill | None = None
    #: Seconds the action spent frozen (``MemoryControl``), once it ended.
    frozen_s: float = 0.0
    #: A fork of the action was refused by ``max_processes``.
    process_limited: bool = False
    #: False when something the action started may still run (see
    #: ``ProcessOutcome.ended_alone``): the directory is then removed.
    reusable: bool = True
    #: The directory is kept for debugging (never released).
    kept: bool = False
    #: The held mount namespace of the ended action's view, closed with the
    #: directory's release (``ActionDirectories``).
    view_held: int | None = None

    @property
    def lease_id(self) -> str:
        return self.lease.lease_id

    def kill(self, reason: str, final: bool) -> None:
        """Kill the action's whole tree now (frozen or not), remembered as a
        ``MemoryKill`` (``final``: not retried). Does nothing when the action
        is not running; a process already gone is skipped."""
        if self.group is None:
            return
        sampler = self.parts.sampler
        log.debug("worker %s: killing %s: %s", self.parts.spec.name, self.lease_id, reason)
        usage = sampler.snapshot(self.lease_id) if sampler is not None else None
        self.killed = MemoryKill(usage, reason, final)
        self.parts.containment.signal_action(self.group, signal.SIGKILL)
        for pid in sampler.members(self.lease_id) if sampler is not None else ():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def failed(self, error: LreError) -> Outcome:
        """A request lre cannot run: final, with metadata; logged (INFO if expected)."""
        level = logging.INFO if isinstance(error, MissingBlobs) else logging.WARNING
        worker, name = self.parts.spec.name, self.lease.operation_name
        trace = isinstance(error, Internal)
        log.log(level, "worker %s: %s failed: %s", worker, name, error, exc_info=trace)
        self.timeline.mark("worker_completed")
        result = re_pb2.ActionResult(execution_metadata=self.timeline.to_proto(worker))
        return Completed(result, error=error, message=error.message)

    async def stage(self) -> Staged:
        """Stage phase: the Command prepared, the input tree read and staged
        into ``action_dir`` (its blobs pinned meanwhile), the view chosen.

        Raises ``LreError`` subclasses for an unusable request (invalid
        names, missing blobs, a symlink the policy refuses, limits passed)
        and ``OSError`` when the filesystem fails.
        """
        parts, spec, lease, action_dir = self.parts, self.parts.spec, self.lease, self.action_dir
        root = action_dir.root
        self.timeline.mark("input_fetch_start")
        prepared = prepare_command(
            lease.command,
            entrypoint=spec.entrypoint,
            additional_environment=spec.additional_environment,
            platform=lease.platform,
            timeout_s=lease.timeout_s,
            input_root=root,
            default_path=spec.default_path,
        )
        if spec.private_tmp:
            for name in ("TMPDIR", "TMP", "TEMP"):
                prepared.env.setdefault(name, str(action_dir.tmp))
        input_root = Digest.from_proto(
            lease.action.input_root_digest, field="Action.input_root_digest"
        )
        if input_root == EMPTY_DIGEST:  # an empty Directory serialises to no bytes
            tree = InputTree()
        else:
            tree = await fetch_input_tree(
                parts.tree_reader,
                input_root,
                allow_escaping_symlinks=parts.output_policy.allow_escaping_symlinks,
                limits=parts.limits,
                extents=parts.extents,
            )
        parents = [request.relative for request in prepared.outputs]
        if prepared.working_directory:
            parents.append(prepared.working_directory + "/.")
        pin = parts.pin if tree.files else None
        held = pin([f.digest for f in tree.files]) if pin is not None else None
        try:
            staged = await stage_inputs(
                parts.store,
                tree,
                root,
                output_parents=parents,
                local_files=parts.local_files,
                existing=action_dir.existing,
                # Under the mapping lre's directories show as the action's.
                owner=None if parts.input_idmap is not None else parts.directories.owner,
            )
        finally:
            if held is not None:
                held.release()
        self.timeline.mark("input_fetch_completed")
        policy = parts.view_policy
        view = policy.view_for(lease.platform, action_dir) if policy is not None else None
        return Staged(prepared, view, staged.links if view is None else {})

    async def execute(self, staged: Staged) -> Executed:
        """Execute phase: the process run to its end (``_spawn``), its linked
        inputs journaled while it runs; then, however it ended (an error and
        cancellation included), the inputs it altered withdrawn and the
        journal entry closed. Errors of the run propagate after that."""
        linked, journal = staged.linked, self.parts.journal
        token = journal.started(linked) if linked and journal is not None else None
        # Whether nothing the action started can still run. Until the run
        # returned (an error or a cancellation ended and reaped the process),
        # that is known only to a backend that always ends actions alone.
        alone = self.parts.containment.ends_alone
        try:
            process, sampled = await self._spawn(staged)
            alone = process.ended_alone
        finally:
            # Unless alone, something of the action may still write: its
            # linked inputs are withdrawn, its outputs copied rather than
            # moved (``collect``), and its directory removed.
            if not alone:
                self.reusable = False
            if linked:
                with trio.CancelScope(shield=True):
                    await self._check_inputs(linked, all_altered=not alone)
            if token is not None and journal is not None:
                journal.ended(token)
        peak, source = memory_figure(process, sampled)
        cpu_seconds = process.cpu_seconds
        samples = 0
        if sampled is not None and sampled.samples:
            cpu_seconds = max(cpu_seconds, sampled.cpu_seconds)
            samples = sampled.samples
        usage = Usage(
            peak_rss_bytes=peak,
            cpu_seconds=cpu_seconds,
            wall_seconds=max(0.0, process.ended_at - process.started_at - self.frozen_s),
            frozen_seconds=self.frozen_s,
            memory_source=source,
        )
        return Executed(process, usage, samples)

    def stopped(self, executed: Executed) -> Outcome | None:
        """The outcome of an action lre stopped (killed for memory, a fork
        refused by ``max_processes``), None for one that ended by itself."""
        kill, spec = self.killed, self.parts.spec
        if kill is not None:
            killed_peak = kill.usage.peak_memory_bytes if kill.usage is not None else 0
            peak = max(killed_peak, executed.usage.peak_rss_bytes)
            return MemoryExceeded(peak, usage=executed.usage, reason=kill.reason, final=kill.final)
        if self.process_limited:
            return self.failed(
                limit_error(spec.name, self.lease.operation_name, spec.max_processes)
            )
        return None

    async def doomed(self, staged: Staged, executed: Executed, killed: MemoryExceeded) -> Outcome:
        """``killed`` with the killed run's result: exit code 137, stdout and
        stderr with lre's explanation (``doomed_explanation``) appended, its
        timeline and usage; no outputs, never cached. When the logs cannot be
        read or stored (a full disk), ``killed`` as it is (the operation then
        ends with RESOURCE_EXHAUSTED), logged."""
        parts, lease = self.parts, self.lease
        text = doomed_explanation(lease, killed, parts.ceiling)
        try:
            _append_to_log(self.action_dir.stderr, executed.process.log_files[1], text)
            self.timeline.mark("output_upload_start")
            found, logs = await self._read_outputs(staged.view, [], executed.process)
            await upload_outputs(parts.store, logs, found.blobs, adopt=None)
        except (LreError, OSError) as error:
            log.warning(
                "worker %s: the logs of %s, killed for its memory, could not be kept: %s",
                parts.spec.name,
                lease.operation_name,
                error,
            )
            return killed
        self.timeline.mark("output_upload_completed")
        max_inline = parts.spec.upload_action_result.max_inline_bytes
        result = action_result(lease, found, logs, executed.process, max_inline_bytes=max_inline)
        result.exit_code = 128 + signal.SIGKILL
        self._finish_metadata(result, executed, killed.peak_rss_bytes)
        return dataclasses.replace(killed, result=result)

    async def collect(
        self, staged: Staged, process: ProcessOutcome
    ) -> tuple[FoundOutputs, list[FoundFile]]:
        """Collect phase: a failed action's directory kept when debugging asks
        for it, its outputs and logs read and put in the CAS (moved where the
        store adopts files and nothing of the action runs any more).

        Raises ``LreError`` subclasses for outputs the policy, the limits or
        the store refuse and ``OSError`` when the filesystem fails.
        """
        parts, lease, action_dir = self.parts, self.lease, self.action_dir
        policy = parts.view_policy
        if policy is not None and policy.keeps(lease.platform, process):
            # Never recycled (so never released); the next start removes it.
            self.reusable, self.kept = False, True
            await trio.to_thread.run_sync(policy.keep_upper, action_dir)
            policy.log_kept(parts.spec.name, lease.operation_name, action_dir, process)
        self.timeline.mark("output_upload_start")
        found, logs = await self._read_outputs(staged.view, staged.prepared.outputs, process)
        all_files = [f for _, f in found.files] + found.tree_files + logs
        adopt = parts.adopt if process.ended_alone else None
        await upload_outputs(parts.store, all_files, found.blobs, adopt=adopt)
        self.timeline.mark("output_upload_completed")
        return found, logs

    async def record(
        self, found: FoundOutputs, logs: list[FoundFile], executed: Executed
    ) -> Outcome:
        """Record phase: the result with its execution metadata, cached per
        the worker's policy (a cache that refuses it is logged, never fatal)."""
        process, lease, spec = executed.process, self.lease, self.parts.spec
        max_inline = spec.upload_action_result.max_inline_bytes
        result = action_result(lease, found, logs, process, max_inline_bytes=max_inline)
        error: LreError | None = None
        message = ""
        if process.timed_out:
            error = DeadlineExceeded(
                f"action timed out after {lease.timeout_s:g} s (stdout/stderr are partial)"
            )
            message = error.message
        elif process.signal is not None:
            message = f"action {process.describe}"
        self._finish_metadata(result, executed, executed.usage.peak_rss_bytes)
        await cache_result(self.parts.action_cache, spec, lease, result, error)
        return Completed(
            result,
            error=error,
            message=message,
            usage=executed.usage,
            oom_killed=process.oom_killed,
        )

    def _finish_metadata(
        self, result: re_pb2.ActionResult, executed: Executed, peak_rss: int
    ) -> None:
        """Close ``result``'s timeline and attach the run's resource usage
        (``peak_rss``: the figure this outcome reports, bytes)."""
        lease = self.lease
        self.timeline.mark("worker_completed")
        result.execution_metadata.CopyFrom(self.timeline.to_proto(self.parts.spec.name))
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

    async def _read_outputs(
        self, view: ViewOf | None, outputs: list[OutputRequest], process: ProcessOutcome
    ) -> tuple[FoundOutputs, list[FoundFile]]:
        """``collect_outputs`` of the attempt's directory: in a view, what the
        action wrote is in the overlay's upper layer, over the staged tree;
        outputs are read from both, merged."""
        directory = self.action_dir
        return await collect_outputs(
            self.parts.workdir,
            directory.root if view is None else directory.upper,
            None if view is None else directory.root,
            "trusted" if view is None else view.xattrs,
            outputs,
            (directory.stdout, directory.stderr),
            process.log_files,
            self.parts.output_policy,
        )

    async def _check_inputs(self, linked: LinkedInputs, *, all_altered: bool = False) -> None:
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
        files = self.parts.local_files
        for digest, executable in altered:
            log.warning(
                "worker %s: action %s altered its hardlinked input %s (%s); "
                "the CAS copy is discarded and must be uploaded again",
                self.parts.spec.name,
                self.lease.operation_name,
                digest,
                "executable" if executable else "plain",
            )
            if files is not None:
                await files.discard(digest, executable)

    async def _spawn(self, staged: Staged) -> tuple[ProcessOutcome, ActionUsage | None]:
        """Run the process under the worker's jobserver, sampler and memory
        control, and end its registrations with them however it ended."""
        parts, spec, lease, action_dir = self.parts, self.parts.spec, self.lease, self.action_dir
        prepared, lease_id = staged.prepared, lease.lease_id
        sampler, memory = parts.sampler, parts.memory
        env = prepared.env
        pool: JobserverPool | None = None
        shared = False
        if spec.jobserver.enabled:
            pool, shared = parts.jobservers.take(lease, str(action_dir.stdout.parent / TMP_NAME))
            env = pool.environment(env)
        # With the jobserver disabled the Command's own MAKEFLAGS & co. pass
        # through untouched (lre configured unbounded).

        def started(pid: int) -> None:
            self.group = pid
            if sampler is not None:
                sampler.register(
                    lease_id,
                    pid,
                    kill_line_bytes=parts.ceiling.ceiling_bytes,
                    private_tmpfs=staged.view is not None,
                    helpers=parts.containment.helper_processes,
                )
            if memory is not None:
                memory.started(lease_id, pid, lease.reservation.memory_bytes)

        try:
            self.timeline.mark("execution_start")
            process = await run_process(
                SpawnRequest(
                    prepared.argv,
                    cwd=prepared.cwd(action_dir.root),
                    env=env,
                    stdout_path=action_dir.stdout,
                    stderr_path=action_dir.stderr,
                    timeout=lease.timeout_s,
                    kill_grace=spec.kill_grace_s,
                    pass_fds=pool.pass_fds if pool is not None else (),
                    on_started=started,
                    nice=spec.nice,
                    containment=parts.containment,
                    block_network=blocks_network(lease.platform, spec.network == "block"),
                    view=staged.view,
                    max_processes=spec.max_processes,
                    max_open_files=spec.max_open_files,
                    paused_seconds=(
                        (lambda: memory.frozen_seconds(lease_id)) if memory is not None else None
                    ),
                    end_frozen=(
                        (lambda: memory.end_frozen(lease_id)) if memory is not None else None
                    ),
                    identity=parts.identity,
                    on_view_held=lambda fd: setattr(self, "view_held", fd),
                )
            )
            self.timeline.mark("execution_completed")
        finally:
            if memory is not None:
                self.frozen_s = memory.ended(lease_id)
            first, self.group = self.group, None
            if first is not None and process_limits().ended(first):
                self.process_limited = True
            sampled = sampler.unregister(lease_id) if sampler is not None else None
            if pool is not None:
                parts.jobservers.give_back(lease_id, pool, shared)
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
