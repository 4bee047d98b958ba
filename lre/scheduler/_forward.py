"""``ForwardScheduler``: the local scheduler, plus forwarding to an upstream cluster.

It offers the client side of ``Scheduler`` (``submit``, ``watch``,
``get_operation``, ``list_operations``, ``cancel``, ``delete``,
``statistics``), so the Execution service cannot tell the difference.
Every submission becomes one of its own operations; a routing task then
decides where it runs (the rule set, documented in docs/upstream.md):

1. **overflow**: while more than ``rules.overflow_queue_depth`` actions
   (0 = never) routed to the local scheduler wait there (checking the cache
   or queued, not yet executing), new actions a local worker could run go
   upstream;
2. **unsatisfiable**: with ``rules.unsatisfiable``, an action whose
   platform (after the local property modifications) no local worker can
   ever satisfy (``explain_unsatisfiable``: ``OSFamily=windows``, a
   ``pool`` the laptop lacks, more CPUs or memory than any worker has, a
   property key the local scheduler does not know) goes upstream;
3. everything else runs locally (submitted to ``local`` and mirrored).

A forwarded action's inputs are copied to the upstream CAS first (only the
blobs it lacks), then it is executed there and its stages stream back as
if local; nothing is downloaded (the result's blobs are read through the
fast_slow CAS when a client asks). Forwarded operations say so in their
``message`` and are listed by ``forward_statistics()`` (the TUI marks
them).

Failure: the upstream never fails a build the laptop can run. When it is
unreachable (UNAVAILABLE, refused credentials, open circuit), overloaded
(RESOURCE_EXHAUSTED), times out (DEADLINE_EXCEEDED) or refuses the action
(FAILED_PRECONDITION, INVALID_ARGUMENT: an unregistered platform property,
say), an overflow action runs on the local queue instead, and an action no
local worker can run fails with FAILED_PRECONDITION carrying the upstream's
reason; each cause (gRPC code) is logged once and counted
(``ForwardStatistics.fallbacks`` / ``refused``). Other upstream results,
including an action's own non-zero exit, are passed through unchanged.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import trio

from lre.cas import BlobStore, read_message
from lre.config import ForwardRulesSpec, PropertyModification
from lre.digest import Digest, resolve_digest_function
from lre.errors import (
    Cancelled,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    LreError,
    NotFound,
    StatusCode,
    Unavailable,
)
from lre.proto import re_pb2
from lre.scheduler._forward_upstream import UpstreamExecutor
from lre.scheduler._matching import (
    apply_modifications,
    explain_unsatisfiable,
    platform_of,
    requirements_of,
)
from lre.scheduler._model import ActionKey, OperationSnapshot, RequestInfo, Stage, WorkerInfo
from lre.scheduler._names import new_operation_name, parse_operation_name
from lre.scheduler._scheduler import Scheduler
from lre.scheduler._statistics import SchedulerStatistics
from lre.scheduler._watch import OperationWatch, attach_watcher, detach_watcher
from lre.upstream import UpstreamStatistics, UpstreamUnavailable

log = logging.getLogger(__name__)

_SWEEP_INTERVAL_S = 0.5

#: Upstream answers after which an action a local worker can run runs locally:
#: the upstream is unreachable or overloaded, timed out, or refused the action
#: (an unregistered platform property, a precondition such as missing inputs).
_FALLBACK_CODES = frozenset(
    {
        StatusCode.UNAVAILABLE,
        StatusCode.RESOURCE_EXHAUSTED,
        StatusCode.DEADLINE_EXCEEDED,
        StatusCode.FAILED_PRECONDITION,
        StatusCode.INVALID_ARGUMENT,
    }
)


def _falls_back(error: LreError) -> bool:
    return isinstance(error, UpstreamUnavailable) or error.code in _FALLBACK_CODES


@dataclass(frozen=True, slots=True)
class ForwardedOperation:
    """One operation running upstream, for the TUI."""

    name: str
    action_hash: str
    stage: str
    reason: str
    started_at: float  # wall clock
    uploaded_blobs: int


@dataclass(frozen=True, slots=True)
class ForwardStatistics:
    """Counters since start and the operations upstream right now.

    ``forwarded`` counts by reason (``unsatisfiable``, ``overflow``);
    ``fell_back_local`` counts overflow actions run locally because the
    upstream could not or would not run them, ``fallbacks`` the same by
    gRPC code name (``UNAVAILABLE``, ``FAILED_PRECONDITION``, ...), and
    ``refused`` by code name the actions no local worker could run that
    failed for it.
    """

    upstream: UpstreamStatistics
    forwarded: Mapping[str, int]
    completed_upstream: int
    failed_upstream: int
    fell_back_local: int
    inflight: tuple[ForwardedOperation, ...]
    fallbacks: Mapping[str, int] = field(default_factory=dict)
    refused: Mapping[str, int] = field(default_factory=dict)


class _Op:
    __slots__ = (
        "abandon_token",
        "cached",
        "changed",
        "done",
        "error",
        "forwarded",
        "key",
        "local_name",
        "message",
        "name",
        "queued_at",
        "reason",
        "request",
        "request_info",
        "result",
        "scope",
        "stage",
        "started_at",
        "uploaded",
        "waiting",
        "watchers",
    )

    def __init__(
        self, name: str, key: ActionKey, request: re_pb2.ExecuteRequest, info: RequestInfo
    ) -> None:
        self.name = name
        self.key = key
        self.request = request
        self.request_info = info
        self.stage = Stage.CACHE_CHECK
        self.done = False
        self.result: re_pb2.ActionResult | None = None
        self.cached = False
        self.error: LreError | None = None
        self.message = ""
        self.changed = trio.Event()
        self.watchers = 0
        self.abandon_token = 0
        self.forwarded = False
        self.reason = ""
        self.local_name: str | None = None
        self.scope: trio.CancelScope | None = None
        self.queued_at = time.time()
        self.started_at = 0.0
        self.uploaded = 0
        self.waiting = False


class ForwardScheduler:
    """See the module docstring.

    - ``local``: the in-process scheduler that runs what stays local.
    - ``executor``: runs forwarded actions upstream.
    - ``local_cas``: where the Action and Command are read for routing.
    - ``property_types`` / ``modifications``: those of ``local`` (to judge
      platforms as it would).
    - ``local_workers``: the local workers' descriptions right now.
    """

    def __init__(
        self,
        local: Scheduler,
        executor: UpstreamExecutor,
        *,
        rules: ForwardRulesSpec,
        local_cas: BlobStore,
        property_types: Mapping[str, str],
        local_workers: Callable[[], Sequence[WorkerInfo]],
        modifications: Sequence[PropertyModification] = (),
        retain_completed_for_s: float = 60.0,
        detach_grace_s: float = 2.0,
    ) -> None:
        self.local = local
        self.executor = executor
        self.rules = rules
        self._cas = local_cas
        self._types = dict(property_types)
        self._local_workers = local_workers
        self._modifications = tuple(modifications)
        self._retain_s = retain_completed_for_s
        self._detach_grace_s = detach_grace_s
        self.progress_interval_s = local.progress_interval_s
        self._nursery: trio.Nursery | None = None
        self._ops: dict[str, _Op] = {}
        self._retained: deque[tuple[float, _Op]] = deque()
        self._forwarded: Counter[str] = Counter()
        self._counters: Counter[str] = Counter()
        self._fallbacks: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()
        self._logged_causes: set[str] = set()
        self._waiting_locally = 0

    # ================================================================ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; unfinished operations end CANCELLED and the
        executor's upstream client is closed."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                while True:
                    await trio.sleep(_SWEEP_INTERVAL_S)
                    self._sweep()
        finally:
            self._nursery = None
            for op in list(self._ops.values()):
                self._complete(op, error=Cancelled(f"operation {op.name}: lre is shutting down"))
            with trio.CancelScope(shield=True):
                await self.executor.client.aclose()

    # ================================================================ clients

    def submit(
        self, request: re_pb2.ExecuteRequest, *, request_info: RequestInfo | None = None
    ) -> OperationSnapshot:
        """Like ``Scheduler.submit``: validates the request, returns at CACHE_CHECK."""
        if self._nursery is None:
            raise Unavailable("the scheduler is not running")
        digest = Digest.from_proto(request.action_digest, field="action_digest")
        function = resolve_digest_function(request.digest_function, digest.hash)
        key = ActionKey(request.instance_name, function, digest)
        copy = re_pb2.ExecuteRequest()
        copy.CopyFrom(request)
        info = request_info or RequestInfo()
        op = _Op(new_operation_name(request.instance_name), key, copy, info)
        self._ops[op.name] = op
        self._nursery.start_soon(self._route, op)
        return self._snapshot(op)

    def watch(self, name: str) -> OperationWatch[_Op]:
        """Updates of ``name``; ``NotFound`` like ``Scheduler.watch``."""
        return OperationWatch(self, self._find(name), progress_interval_s=self.progress_interval_s)

    def get_operation(self, name: str) -> OperationSnapshot:
        return self._snapshot(self._find(name))

    def list_operations(self, instance_name: str | None = None) -> list[OperationSnapshot]:
        ops = [
            op
            for op in self._ops.values()
            if instance_name is None or op.key.instance_name == instance_name
        ]
        return [self._snapshot(op) for op in ops]

    def cancel(self, name: str) -> None:
        self._cancel(self._find(name), "cancelled by CancelOperation")

    def delete(self, name: str) -> None:
        op = self._find(name)
        del self._ops[op.name]

    def is_forwarded(self, name: str) -> bool:
        """Whether operation ``name`` runs (or ran) upstream."""
        return self._find(name).forwarded

    # ================================================================ observers

    def statistics(self) -> SchedulerStatistics:
        """The local scheduler's statistics (forwarded work is not in them)."""
        return self.local.statistics()

    def forward_statistics(self) -> ForwardStatistics:
        inflight = tuple(
            ForwardedOperation(
                name=op.name,
                action_hash=op.key.action_digest.hash,
                stage=op.stage.name,
                reason=op.reason,
                started_at=op.started_at,
                uploaded_blobs=op.uploaded,
            )
            for op in self._ops.values()
            if op.forwarded and not op.done
        )
        return ForwardStatistics(
            upstream=self.executor.client.statistics(),
            forwarded=dict(self._forwarded),
            completed_upstream=self._counters["completed_upstream"],
            failed_upstream=self._counters["failed_upstream"],
            fell_back_local=self._counters["fell_back_local"],
            fallbacks=dict(self._fallbacks),
            refused=dict(self._refused),
            inflight=inflight,
        )

    # ================================================================ routing

    async def _route(self, op: _Op) -> None:
        try:
            with trio.CancelScope() as scope:
                op.scope = scope
                reason = await self._forward_reason(op)
                if op.done:
                    return
                if reason is None:
                    await self._run_local(op)
                else:
                    await self._run_upstream(op, reason)
        except LreError as error:
            self._complete(op, error=error)
        except Exception:  # trio.Cancelled is a BaseException and passes through
            log.exception("routing operation %s failed", op.name)
            self._complete(
                op,
                error=Internal(f"action {op.key.action_digest}: lre failed while routing it"),
            )
        finally:
            if not op.done:
                self._complete(op, error=Cancelled(f"operation {op.name}: cancelled"))

    async def _forward_reason(self, op: _Op) -> str | None:
        """Why ``op`` goes upstream, or None to run it locally.

        The overflow rule is judged last, with no await between it and the
        caller's ``_run_local``: actions routed at the same moment then see
        each other among those waiting locally."""
        if self.rules.unsatisfiable:
            why = await self._unsatisfiable(op)
            if why is not None:
                return f"unsatisfiable locally: {why}"
        depth = self.rules.overflow_queue_depth
        if depth > 0 and self._waiting_locally > depth:
            return f"overflow: {self._waiting_locally} actions wait locally (limit {depth})"
        return None

    async def _unsatisfiable(self, op: _Op) -> str | None:
        """Why no local worker can ever run ``op``, or None."""
        try:
            action = await read_message(self._cas, op.key.action_digest, re_pb2.Action)
            command_digest = Digest.from_proto(action.command_digest, field="command_digest")
            command = await read_message(self._cas, command_digest, re_pb2.Command)
        except (NotFound, InvalidArgument):
            return None  # the local scheduler reports it properly
        platform = apply_modifications(platform_of(action, command), self._modifications)
        try:
            requirements = requirements_of(platform, self._types)
        except FailedPrecondition as error:
            return error.message
        except InvalidArgument:
            return None
        return explain_unsatisfiable(requirements, self._local_workers())

    def _stop_waiting(self, op: _Op) -> None:
        if op.waiting:
            op.waiting = False
            self._waiting_locally -= 1

    async def _run_local(self, op: _Op) -> None:
        # Waiting locally until it executes or ends (the overflow rule's count).
        op.waiting = True
        self._waiting_locally += 1
        snapshot = self.local.submit(op.request, request_info=op.request_info)
        op.local_name = snapshot.name
        async with self.local.watch(snapshot.name) as updates:
            async for update in updates:
                if update.done:
                    self._complete(
                        op,
                        result=update.result,
                        cached=update.cached_result,
                        error=update.error,
                        message=update.message,
                    )
                    return
                self._set_stage(op, update.stage)

    async def _run_upstream(self, op: _Op, reason: str) -> None:
        kind = reason.split(":", 1)[0].split()[0]
        op.forwarded = True
        op.reason = reason
        op.started_at = time.time()
        op.message = f"forwarded to upstream {self.executor.client.name} ({reason})"
        self._forwarded[kind] += 1
        self._notify(op)
        log.info("operation %s: %s", op.name, op.message)
        try:
            outcome = await self.executor.run(
                op.request, op.key.action_digest, lambda stage: self._set_stage(op, stage)
            )
        except LreError as error:
            if not _falls_back(error):
                self._counters["failed_upstream"] += 1
                raise
            await self._upstream_declined(op, kind, reason, error)
            return
        if outcome.error is not None and _falls_back(outcome.error):
            await self._upstream_declined(op, kind, reason, outcome.error)
            return
        op.uploaded = outcome.uploaded_blobs
        self._counters["completed_upstream"] += 1
        self._complete(
            op,
            result=outcome.result,
            cached=outcome.cached_result,
            error=outcome.error,
            message=outcome.message or op.message,
        )

    async def _upstream_declined(self, op: _Op, kind: str, reason: str, error: LreError) -> None:
        """The upstream could not or would not run ``op``: run it locally when a
        local worker can (overflow), else fail it with FAILED_PRECONDITION
        carrying the upstream's reason. Each cause is logged once."""
        cause = error.code.name
        self._counters["failed_upstream"] += 1
        local = kind == "overflow"
        if cause not in self._logged_causes:
            self._logged_causes.add(cause)
            log.warning(
                "upstream %s did not run a forwarded action (%s); %s (logged once per cause)",
                self.executor.client.name,
                error.message,
                "actions a local worker can run now run locally"
                if local
                else "actions no local worker can run fail with FAILED_PRECONDITION",
            )
        if not local:
            self._refused[cause] += 1
            raise FailedPrecondition(
                f"action {op.key.action_digest} cannot run on a local worker ({reason}) and "
                f"upstream {self.executor.client.name} did not run it: {error.message}"
            ) from None
        self._fallbacks[cause] += 1
        self._counters["fell_back_local"] += 1
        op.forwarded = False
        op.message = ""
        await self._run_local(op)

    # ================================================================ state

    def _find(self, name: str) -> _Op:
        op = self._ops.get(name)
        if op is None:
            parse_operation_name(name)
            raise NotFound(
                f"operation {name!r}: not found (unknown, deleted, or finished more than "
                f"{self._retain_s:g} s ago)"
            )
        return op

    def _snapshot(self, op: _Op) -> OperationSnapshot:
        return OperationSnapshot(
            name=op.name,
            stage=op.stage,
            action_key=op.key,
            done=op.done,
            result=op.result,
            cached_result=op.cached,
            error=op.error,
            message=op.message,
            queued_at=op.queued_at,
        )

    def _notify(self, op: _Op) -> None:
        event, op.changed = op.changed, trio.Event()
        event.set()

    def _set_stage(self, op: _Op, stage: Stage) -> None:
        if stage is Stage.EXECUTING:
            self._stop_waiting(op)
        if op.done or stage is Stage.COMPLETED or stage == op.stage:
            return
        op.stage = stage
        self._notify(op)

    def _complete(
        self,
        op: _Op,
        *,
        result: re_pb2.ActionResult | None = None,
        cached: bool = False,
        error: LreError | None = None,
        message: str = "",
    ) -> None:
        self._stop_waiting(op)
        if op.done:
            return
        op.done = True
        op.stage = Stage.COMPLETED
        op.result = result
        op.cached = cached
        op.error = error
        op.message = message or op.message
        self._retained.append((trio.current_time() + self._retain_s, op))
        self._notify(op)

    def _cancel(self, op: _Op, reason: str) -> None:
        if op.done:
            return
        if op.local_name is not None and not op.forwarded:
            try:
                self.local.cancel(op.local_name)
            except NotFound:
                pass
        if op.scope is not None:
            op.scope.cancel()
        self._complete(op, error=Cancelled(f"operation {op.name}: {reason}"))

    def _attach(self, op: _Op) -> None:
        attach_watcher(op)

    def _detach(self, op: _Op) -> None:
        detach_watcher(
            op,
            self._detach_grace_s,
            self._nursery,
            lambda: self._cancel(op, "no client is watching it any more"),
        )

    def _sweep(self) -> None:
        now = trio.current_time()
        while self._retained and self._retained[0][0] <= now:
            _, op = self._retained.popleft()
            if self._ops.get(op.name) is op:
                del self._ops[op.name]
