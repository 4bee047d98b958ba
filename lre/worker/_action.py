"""One leased action, end to end, in four named phases.

``ActionRunner.run(lease)`` takes an action directory, makes the lease's
``Attempt`` and runs its phases in order (*stage*, *execute*, *collect*,
*record*: ``_attempt.py``), then releases the directory.

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

import logging
import os

import trio

from lre.errors import Cancelled, Internal, LreError
from lre.scheduler import InfrastructureFailure, Lease, MemoryExceeded, Outcome
from lre.worker._action_result import ActionResultWriter
from lre.worker._attempt import Attempt
from lre.worker._metadata import Timeline
from lre.worker._runner_parts import RunnerContext, RunnerParts
from lre.worker.directories import request_error
from lre.worker.usage import ActionUsage
from lre.worker.view import WritableRefused

__all__ = ["ActionResultWriter", "ActionRunner", "RunnerContext"]

log = logging.getLogger(__name__)


class ActionRunner:
    """Runs leased actions for one worker with the parts of ``context``
    (``parts``: ``RunnerParts``), one ``Attempt`` per lease."""

    def __init__(self, context: RunnerContext) -> None:
        self.parts = RunnerParts(context)
        #: lease id -> its attempt running now
        self._attempts: dict[str, Attempt] = {}

    def jobserver_tokens(self) -> tuple[int, int]:
        """``(in_use, total)`` tokens over the private pools of running actions."""
        return self.parts.jobservers.tokens()

    def close(self) -> None:
        """Release what the parts hold for the worker (call when no action runs)."""
        self.parts.close()

    def over_limit(self, usage: ActionUsage) -> None:
        """Sampler hook: an action passed the hard ceiling; kill it (final)."""
        self.memory_kill(usage.action_id, "it passed the hard memory ceiling", True)

    def memory_kill(self, action_id: str, reason: str, final: bool) -> None:
        """Kill the action's whole tree now (frozen or not); its run then ends
        with ``MemoryExceeded`` (``final``: not retried). Unknown ids are ignored."""
        attempt = self._attempts.get(action_id)
        if attempt is not None:
            attempt.kill(reason, final)

    async def run(self, lease: Lease) -> Outcome:
        """Run one attempt of ``lease``'s action and return its outcome."""
        parts, name = self.parts, self.parts.spec.name
        timeline = Timeline(queued=lease.queued_at)
        timeline.mark("worker_start")
        action_dir = await parts.directories.take()
        attempt = Attempt(parts, lease, action_dir, timeline)
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
            return attempt.failed(error)
        except WritableRefused as refusal:  # found where the view was built
            assert parts.view_policy is not None
            return attempt.failed(parts.view_policy.refused(lease.platform, refusal))
        except (OSError, ExceptionGroup) as error:
            known = request_error(error, name, lease.operation_name)  # disk full
            if known is not None:
                return attempt.failed(known)
            if isinstance(error, ExceptionGroup):
                raise
            log.exception("worker %s: action %s failed", name, lease.operation_name)
            return InfrastructureFailure(Internal(f"worker {name}: {error.strerror or error}"))
        except Exception as error:  # a defect met by one action ends that action only
            failure = Internal(f"worker {name}: lre failed on this action: {error!r}")
            return attempt.failed(failure)  # logged there, with the trace
        finally:
            self._attempts.pop(lease.lease_id, None)
            held = attempt.view_held
            if attempt.kept:
                if held is not None:
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(os.close, held)
                await parts.directories.forget(action_dir)
            else:
                await parts.directories.release(action_dir, reusable=attempt.reusable, view=held)

    async def _run(self, attempt: Attempt) -> Outcome:
        """The four phases in order; an action killed for memory or refused a
        fork ends after *execute*, with no outputs collected (a kill that ends
        the operation with its logs only: ``Attempt.doomed``)."""
        staged = await attempt.stage()
        executed = await attempt.execute(staged)
        stopped = attempt.stopped(executed)
        if isinstance(stopped, MemoryExceeded) and (stopped.final or attempt.lease.last_chance):
            return await attempt.doomed(staged, executed, stopped)
        if stopped is not None:
            return stopped
        found, logs = await attempt.collect(staged, executed.process)
        return await attempt.record(found, logs, executed)
