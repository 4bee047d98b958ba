"""One leased action, end to end: stage, run, collect, cache, describe.

``ActionRunner.run(lease)`` never raises for problems of the action or of
lre; it returns the ``Outcome`` to report:

- ``Completed`` when the action ran (any exit code; ``DeadlineExceeded``
  with the partial result on timeout), and also when the request itself is
  unusable (invalid names, missing blobs, a symlink the policy refuses):
  those end the operation with that error and are not retried.
- ``MemoryExceeded`` when the memory control killed it: memory was short
  (requeued one ladder step up) or it passed the hard ceiling (final).
- ``InfrastructureFailure`` when lre failed (disk full, unexpected errors)
  or the lease was cancelled.

Only ``trio.Cancelled`` from an enclosing scope (worker shutdown) propagates,
after the process group is killed and reaped.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

import trio

from lre.cas import BlobStore, DirectoryReader, TreeExtent
from lre.config import LocalWorkerSpec
from lre.digest import EMPTY_DIGEST, Digest
from lre.errors import Cancelled, DeadlineExceeded, Internal, LreError, MissingBlobs
from lre.proto import re_pb2
from lre.scheduler import (
    Completed,
    InfrastructureFailure,
    Lease,
    MemoryExceeded,
    Outcome,
    Usage,
)
from lre.worker._action_dirs import TMP_NAME, ActionDirectories, ActionDirectory
from lre.worker._adoption import unshared_adopter
from lre.worker._command import PreparedCommand, prepare_command
from lre.worker._containment import Containment
from lre.worker._disk_full import request_error
from lre.worker._input_guard import SMALL_CHECK, LinkedInputs, altered_inputs
from lre.worker._input_journal import InputJournal
from lre.worker._input_tree import InputTree, fetch_input_tree
from lre.worker._jobserver import JobserverPool, jobserver_tokens
from lre.worker._limits import ActionLimits
from lre.worker._memory_control import MemoryControl
from lre.worker._metadata import Timeline, resource_usage_any
from lre.worker._output_checks import OutputBudget
from lre.worker._outputs import (
    FoundFile,
    FoundOutputs,
    OutputRequest,
    log_file,
    scan_outputs,
)
from lre.worker._process import ProcessOutcome, default_containment, run_process
from lre.worker._process_limit import limit_error, process_limits
from lre.worker._sampler import ActionUsage, ProcessTreeSampler
from lre.worker._staging import LinkSource, stage_inputs
from lre.worker._upload import Adopter, upload_outputs
from lre.worker._view import OverlayXattrs
from lre.worker._view_policy import ViewOf, ViewPolicy, blocks_network
from lre.worker._workdir import WorkDirectory

log = logging.getLogger(__name__)

#: Largest stdout/stderr/output file inlined into a result on request.
INLINE_LIMIT = 1 << 20
#: When an action asked for no outputs and its stdout and stderr are at most
#: this big, they are hashed on the event loop instead of in a thread (a
#: thread round trip costs more than reading and hashing 64 KiB).
SMALL_LOGS = 64 << 10

#: ``discard(digest, executable)`` withdraws a blob whose hardlinked file an
#: action altered (a filesystem store's ``discard``).
Discarder = Callable[[Digest, bool], Awaitable[object]]


class ActionResultWriter(Protocol):
    """Where results are cached (``lre.cas.ActionResultCache``).

    ``put_result`` raises ``LreError`` subclasses (missing blobs, full).
    """

    async def put_result(self, action_digest: Digest, result: re_pb2.ActionResult) -> object: ...


class ActionRunner:
    """Runs leased actions for one worker.

    ``link_source`` (a filesystem store's ``path_for_link``) lets inputs be
    hardlinked; ``adopt`` (its ``adopt_file``) lets outputs be moved into
    the CAS. ``action_cache`` receives results per the worker's policy.
    ``discard`` (its ``discard``) withdraws a linked input's blob that an
    action altered; ``tainted_inputs`` counts those (see ``_input_guard``).
    ``max_inflight``: the worker's actions at once (0 = unlimited;
    ``LocalWorker`` passes its own), which sizes the stock of ready action
    directories.
    """

    def __init__(
        self,
        spec: LocalWorkerSpec,
        workdir: WorkDirectory,
        store: BlobStore,
        *,
        max_inflight: int = 1,
        action_cache: ActionResultWriter | None = None,
        link_source: LinkSource | None = None,
        adopt: Adopter | None = None,
        sampler: ProcessTreeSampler | None = None,
        discard: Discarder | None = None,
        containment: Containment | None = None,
        journal: InputJournal | None = None,
        directories: DirectoryReader | None = None,
        limits: ActionLimits | None = None,
        hidden_paths: tuple[str, ...] = (),
        memory: MemoryControl | None = None,
        ceiling_bytes: int = 0,
    ) -> None:
        self.spec = spec
        #: Freezes, thaws and kills actions when memory is short (None: never).
        self.memory = memory
        #: RSS above which an action is killed and fails at any time (0 = none).
        self.ceiling_bytes = ceiling_bytes
        #: Bounds on each action's trees and outputs; input subtrees measured.
        self.limits = limits if limits is not None else ActionLimits.of(spec.limits, None)
        self._extents: dict[tuple[str, int], TreeExtent] = {}
        self.containment = containment if containment is not None else default_containment()
        #: Each action's view (None: it sees the host as lre does).
        self.view_policy = ViewPolicy.for_worker(
            spec, self.containment, workdir, store, hidden_paths
        )
        #: Records linked inputs of running actions for crash recovery.
        self.journal = journal
        self.workdir = workdir
        self.store = store
        self.action_cache = action_cache
        self.link_source = link_source
        #: moves an output into the CAS only when no other process holds it
        self.adopt = unshared_adopter(adopt, store) if adopt is not None else None
        self.discard = discard
        #: Linked inputs found altered by their action (and discarded).
        self.tainted_inputs = 0
        self.allow_escaping_symlinks = spec.symlink_policy == "allow"
        self.sampler = sampler
        self.directories = ActionDirectories(workdir, stock=min(128, 2 * max_inflight or 64))
        #: Input Directory messages, each read and validated once (shared
        #: with the scheduler by the composition root).
        self._tree_reader = directories if directories is not None else DirectoryReader(store)
        #: lease id -> process group of actions running now
        self._groups: dict[str, int] = {}
        #: lease id -> (usage, reason, final) of actions killed for memory
        self._over_limit: dict[str, tuple[ActionUsage | None, str, bool]] = {}
        #: lease id -> seconds its action spent frozen (see ``MemoryControl``)
        self._frozen_s: dict[str, float] = {}
        #: leases whose action had a fork refused by ``max_processes``
        self._process_limited: set[str] = set()
        #: lease id -> whether its directory may be recycled (see ``run``)
        self._reusable: dict[str, bool] = {}
        #: leases whose directory is kept for debugging (never released)
        self._kept: set[str] = set()
        #: lease id -> private jobserver pool of actions running now
        self._pools: dict[str, JobserverPool] = {}
        #: One empty pool shared by every action that reserves less than two
        #: CPUs (see ``_jobserver_for``); made on first use.
        self._empty_pool: JobserverPool | None = None

    def jobserver_tokens(self) -> tuple[int, int]:
        """``(in_use, total)`` tokens over the private pools of running actions."""
        in_use = total = 0
        for pool in self._pools.values():
            in_use += pool.in_use()
            total += pool.expected_tokens
        return in_use, total

    def close(self) -> None:
        """Release the shared empty jobserver pool (call when no action runs)."""
        if self._empty_pool is not None:
            self._empty_pool.close()
            self._empty_pool = None

    def over_limit(self, usage: ActionUsage) -> None:
        """Sampler hook: an action passed the hard ceiling; kill it (final)."""
        self.memory_kill(usage.action_id, "it passed the hard memory ceiling", True)

    def memory_kill(self, action_id: str, reason: str, final: bool) -> None:
        """Kill the action's whole tree now (frozen or not); its run then ends
        with ``MemoryExceeded`` (``final``: not retried). Unknown ids are ignored."""
        group = self._groups.get(action_id)
        if group is None:
            return
        usage = self.sampler.snapshot(action_id) if self.sampler is not None else None
        self._over_limit[action_id] = (usage, reason, final)
        log.debug("worker %s: killing %s: %s", self.spec.name, action_id, reason)
        self.containment.signal_action(group, signal.SIGKILL)
        members = self.sampler.members(action_id) if self.sampler is not None else ()
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    async def run(self, lease: Lease) -> Outcome:
        """Run one attempt of ``lease``'s action and return its outcome."""
        timeline = Timeline(queued=lease.queued_at)
        timeline.mark("worker_start")
        action_dir = await self.directories.take()
        #: False when something the action started may still run (see
        #: ``ProcessOutcome.ended_alone``): the directory is then removed.
        self._reusable[lease.lease_id] = True
        try:
            with trio.CancelScope() as scope:
                lease.on_cancel(scope.cancel)
                return await self._run(lease, action_dir, timeline)
            return InfrastructureFailure(
                Cancelled(
                    f"operation {lease.operation_name}: cancelled "
                    f"({lease.cancel_signal.reason or 'no reason given'})"
                )
            )
        except LreError as error:
            return self._failed(lease, timeline, error)
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
            self._frozen_s.pop(lease.lease_id, None)
            self._over_limit.pop(lease.lease_id, None)
            reusable = self._reusable.pop(lease.lease_id, True)
            if lease.lease_id in self._kept:
                self._kept.discard(lease.lease_id)
            else:
                await self.directories.release(action_dir, reusable=reusable)

    def _failed(self, lease: Lease, timeline: Timeline, error: LreError) -> Outcome:
        """A request lre cannot run: final, with metadata; logged (INFO if expected)."""
        level = logging.INFO if isinstance(error, MissingBlobs) else logging.WARNING
        name, trace = lease.operation_name, isinstance(error, Internal)
        log.log(level, "worker %s: %s failed: %s", self.spec.name, name, error, exc_info=trace)
        timeline.mark("worker_completed")
        result = re_pb2.ActionResult(execution_metadata=timeline.to_proto(self.spec.name))
        return Completed(result, error=error, message=error.message)

    async def _run(self, lease: Lease, action_dir: ActionDirectory, timeline: Timeline) -> Outcome:
        root = action_dir.root
        timeline.mark("input_fetch_start")
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
        pin = getattr(self.store, "pin", None) if tree.files else None
        held = pin([f.digest for f in tree.files]) if pin is not None else None
        try:
            staged = await stage_inputs(
                self.store,
                tree,
                root,
                output_parents=parents,
                link_source=self.link_source,
                existing=action_dir.existing,
            )
        finally:
            if held is not None:
                held.release()
        timeline.mark("input_fetch_completed")

        stdout_path = action_dir.stdout
        stderr_path = action_dir.stderr
        view = (
            self.view_policy.view_for(lease.platform, action_dir)
            if self.view_policy is not None
            else None
        )
        # In a view the inputs sit in an overlay's lower layer, which nothing
        # of the action can write: no journal, no check afterwards.
        linked = staged.links if view is None else {}
        token = None
        if linked and self.journal is not None:
            token = self.journal.started(linked)
        try:
            process, sampled = await self._execute(
                lease, prepared, root, stdout_path, stderr_path, timeline, view
            )
        except BaseException:
            # Ended by cancellation or an error: the process was ended and
            # reaped, but whether it ended alone is known only to a backend
            # that always ends actions alone.
            unsure = not self.containment.ends_alone
            if unsure:
                self._reusable[lease.lease_id] = False
            if linked:
                with trio.CancelScope(shield=True):
                    await self._check_inputs(lease, linked, all_altered=unsure)
            if token is not None and self.journal is not None:
                self.journal.ended(token)
            raise
        # Nothing of the action runs any more unless ``ended_alone`` is False;
        # then it may still write: its linked inputs are withdrawn, its
        # outputs copied rather than moved, and its directory removed.
        alone = process.ended_alone
        if not alone:
            self._reusable[lease.lease_id] = False
        if linked:
            with trio.CancelScope(shield=True):
                await self._check_inputs(lease, linked, all_altered=not alone)
        if token is not None and self.journal is not None:
            self.journal.ended(token)
        peak_rss = process.max_rss_bytes
        cpu_seconds = process.cpu_seconds
        samples = 0
        if sampled is not None and sampled.samples:
            peak_rss = sampled.peak_rss_bytes
            cpu_seconds = max(cpu_seconds, sampled.cpu_seconds)
            samples = sampled.samples
        frozen_s = self._frozen_s.pop(lease.lease_id, 0.0)
        usage = Usage(
            peak_rss_bytes=peak_rss,
            cpu_seconds=cpu_seconds,
            wall_seconds=max(0.0, process.ended_at - process.started_at - frozen_s),
            frozen_seconds=frozen_s,
        )
        over = self._over_limit.pop(lease.lease_id, None)
        if over is not None:
            killed_usage, reason, final = over
            killed_peak = killed_usage.peak_rss_bytes if killed_usage is not None else 0
            return MemoryExceeded(
                max(killed_peak, peak_rss), usage=usage, reason=reason, final=final
            )
        if lease.lease_id in self._process_limited:
            self._process_limited.discard(lease.lease_id)
            limited = limit_error(self.spec.name, lease.operation_name, self.spec.max_processes)
            return self._failed(lease, timeline, limited)

        if self.view_policy is not None and self.view_policy.keeps(lease.platform, process):
            # Never recycled (so never released); the next start removes it.
            self._reusable[lease.lease_id] = False
            self._kept.add(lease.lease_id)
            self.view_policy.log_kept(self.spec.name, lease.operation_name, action_dir, process)
        timeline.mark("output_upload_start")
        # In a view, what the action wrote is in the overlay's upper layer,
        # over the staged tree: outputs are read from both, merged.
        found, logs = await self._collect(
            root if view is None else action_dir.upper,
            None if view is None else root,
            "trusted" if view is None else view.xattrs,
            prepared.outputs,
            stdout_path,
            stderr_path,
            process.log_files,
        )
        inline = self._inline_files(lease, found)
        all_files = [f for _, f in found.files] + found.tree_files + logs
        await upload_outputs(
            self.store, all_files, found.blobs, adopt=self.adopt if alone else None
        )
        timeline.mark("output_upload_completed")

        result = self._result(lease, found, logs, inline, process)
        error: LreError | None = None
        message = ""
        if process.timed_out:
            error = DeadlineExceeded(
                f"action timed out after {lease.timeout_s:g} s (stdout/stderr are partial)"
            )
            message = error.message
        elif process.signal is not None:
            message = f"action {process.describe}"
        timeline.mark("worker_completed")
        result.execution_metadata.CopyFrom(timeline.to_proto(self.spec.name))
        result.execution_metadata.auxiliary_metadata.append(
            resource_usage_any(
                peak_rss_bytes=peak_rss,
                cpu_seconds=cpu_seconds,
                reserved_millicpus=lease.reservation.millicpus,
                reserved_memory_bytes=lease.reservation.memory_bytes,
                ladder_step=lease.ladder_step,
                attempt=lease.attempt,
                samples=samples,
            )
        )
        await self._cache(lease, result, error)
        return Completed(
            result, error=error, message=message, usage=usage, oom_killed=process.oom_killed
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
            if self.discard is not None:
                await self.discard(digest, executable)

    async def _collect(
        self,
        root: Path,
        lower: Path | None,
        xattrs: OverlayXattrs,
        outputs: list[OutputRequest],
        stdout_path: Path,
        stderr_path: Path,
        identities: tuple[tuple[int, int], tuple[int, int]],
    ) -> tuple[FoundOutputs, list[FoundFile]]:
        """Scan the outputs (``root`` over ``lower``, its overlay marks in
        ``xattrs``, see ``scan_outputs``)
        and hash stdout/stderr, in one thread round trip (or none when there
        are no outputs and the logs are small)."""
        allow = self.allow_escaping_symlinks
        limits = self.limits
        # Mounts the action left in lre's namespace (cheap while the table is
        # unchanged): what they show is copied, never moved out of its place.
        mounts = tuple(
            point
            for point in self.workdir.mounts.below(root.parent)
            if point == str(root) or point.startswith(f"{root}/")
        )

        def collect() -> tuple[FoundOutputs, list[FoundFile]]:
            budget = OutputBudget(limits)
            found = scan_outputs(
                root,
                outputs,
                allow_escaping_symlinks=allow,
                budget=budget,
                lower=lower,
                xattrs=xattrs,
                mounts=mounts,
            )
            return found, [
                log_file(stdout_path, identities[0], budget),
                log_file(stderr_path, identities[1], budget),
            ]

        if not outputs:
            sizes = os.stat(stdout_path).st_size, os.stat(stderr_path).st_size
            if sizes == (0, 0):
                return FoundOutputs(), [
                    FoundFile(stdout_path, EMPTY_DIGEST, False, b""),
                    FoundFile(stderr_path, EMPTY_DIGEST, False, b""),
                ]
            if max(sizes) <= SMALL_LOGS:
                return collect()
        return await trio.to_thread.run_sync(collect)

    def _jobserver_for(self, lease: Lease, fifo_dir: str) -> tuple[JobserverPool, bool]:
        """The pool an action gets and whether it is the shared empty one.

        An action reserving less than two CPUs has no token to hand out, so it
        gets the worker's one shared empty pool (no pipe made per action):
        with nothing in it no client can take a token, and a SIGKILLed client
        cannot lose one. A client that writes tokens it never read is the only
        way tokens appear there; they are drained (and logged) after every
        action that used the pool. Larger actions get a private pool. A fifo
        lies in ``fifo_dir``, the action's private temporary directory (the one
        directory of lre's its view shows), so the fifo style has no shared
        pool: a fifo in the worker's directory would be out of every view.
        """
        tokens = jobserver_tokens(lease.reservation.millicpus)
        style = self.spec.jobserver.style
        if tokens or style == "fifo":
            return JobserverPool(
                tokens, style=style, fifo_dir=fifo_dir, name=lease.operation_name
            ), False
        if self._empty_pool is None:
            self._empty_pool = JobserverPool(
                0,
                style=style,
                fifo_dir=str(self.workdir.path),
                name=f"{self.spec.name}/one-cpu",
            )
        return self._empty_pool, True

    async def _execute(
        self,
        lease: Lease,
        prepared: PreparedCommand,
        root: Path,
        stdout_path: Path,
        stderr_path: Path,
        timeline: Timeline,
        view: ViewOf | None = None,
    ) -> tuple[ProcessOutcome, ActionUsage | None]:
        env = prepared.env
        lease_id = lease.lease_id
        pool: JobserverPool | None = None
        shared = False
        if self.spec.jobserver.enabled:
            pool, shared = self._jobserver_for(lease, str(stdout_path.parent / TMP_NAME))
            if not shared:
                self._pools[lease_id] = pool
            env = pool.environment(env)
        # With the jobserver disabled the Command's own MAKEFLAGS & co. pass
        # through untouched (lre configured unbounded).

        def started(pid: int) -> None:
            self._groups[lease_id] = pid
            if self.sampler is not None:
                self.sampler.register(lease_id, pid, kill_line_bytes=self.ceiling_bytes)
            if self.memory is not None:
                self.memory.started(lease_id, pid, lease.reservation.memory_bytes)

        memory = self.memory

        try:
            timeline.mark("execution_start")
            process = await run_process(
                prepared.argv,
                cwd=prepared.cwd(root),
                env=env,
                stdout_path=stdout_path,
                stderr_path=stderr_path,
                timeout=lease.timeout_s,
                kill_grace=self.spec.kill_grace_s,
                pass_fds=pool.pass_fds if pool is not None else (),
                on_started=started,
                nice=self.spec.nice,
                containment=self.containment,
                block_network=blocks_network(lease.platform, self.spec.network == "block"),
                view=view,
                max_processes=self.spec.max_processes,
                paused_seconds=(
                    (lambda: memory.frozen_seconds(lease_id)) if memory is not None else None
                ),
                end_frozen=((lambda: memory.end_frozen(lease_id)) if memory is not None else None),
            )
            timeline.mark("execution_completed")
        finally:
            if memory is not None:
                self._frozen_s[lease_id] = memory.ended(lease_id)
            first = self._groups.pop(lease_id, None)
            if first is not None and process_limits().ended(first):
                self._process_limited.add(lease_id)
            sampled = self.sampler.unregister(lease_id) if self.sampler is not None else None
            if pool is not None:
                if shared:
                    pool.drain_extra()
                else:
                    self._pools.pop(lease_id, None)
                    pool.close()
        return process, sampled

    def _inline_files(self, lease: Lease, found: FoundOutputs) -> set[str]:
        wanted = set(lease.inline_output_files)
        return {
            name
            for name, item in found.files
            if name in wanted and item.data is not None and len(item.data) <= INLINE_LIMIT
        }

    def _result(
        self,
        lease: Lease,
        found: FoundOutputs,
        logs: list[FoundFile],
        inline: set[str],
        process: ProcessOutcome,
    ) -> re_pb2.ActionResult:
        result = re_pb2.ActionResult(exit_code=process.exit_code)
        for name, item in found.files:
            output = result.output_files.add(
                path=name, digest=item.digest.to_proto(), is_executable=item.executable
            )
            if name in inline and item.data is not None:
                output.contents = item.data
        for name, tree_digest, root_digest in found.directories:
            result.output_directories.add(
                path=name,
                tree_digest=tree_digest.to_proto(),
                is_topologically_sorted=True,
                root_directory_digest=root_digest.to_proto(),
            )
        for name, target, kind in found.symlinks:
            result.output_symlinks.add(path=name, target=target)
            legacy = (
                result.output_directory_symlinks
                if kind == "directory"
                else result.output_file_symlinks
            )
            legacy.add(path=name, target=target)
        stdout, stderr = logs
        result.stdout_digest.CopyFrom(stdout.digest.to_proto())
        result.stderr_digest.CopyFrom(stderr.digest.to_proto())
        limit = self.spec.upload_action_result.max_inline_bytes
        for item, asked, field_name in (
            (stdout, lease.inline_stdout, "stdout_raw"),
            (stderr, lease.inline_stderr, "stderr_raw"),
        ):
            size = item.digest.size_bytes
            if (
                item.data is not None
                and size
                and ((asked and size <= INLINE_LIMIT) or size <= limit)
            ):
                setattr(result, field_name, item.data)
        return result

    async def _cache(
        self, lease: Lease, result: re_pb2.ActionResult, error: LreError | None
    ) -> None:
        strategy = self.spec.upload_action_result.upload_ac_results_strategy
        if self.action_cache is None or lease.do_not_cache or strategy == "never":
            return
        if error is not None:
            return
        if strategy == "success_only" and result.exit_code != 0:
            return
        try:
            await self.action_cache.put_result(lease.action_key.action_digest, result)
        except LreError:
            log.exception(
                "worker %s: could not cache result of %s", self.spec.name, lease.operation_name
            )
