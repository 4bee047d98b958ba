"""``ForwardScheduler``: the local scheduler, plus forwarding to an upstream cluster.

It offers the client side of ``Scheduler`` (``submit``, ``watch``,
``get_operation``, ``list_operations``, ``cancel``, ``delete``,
``statistics``), so the Execution service cannot tell the difference. It
keeps no operations of its own: every submission is an operation of the
local scheduler it wraps, submitted with a route (``_routing``), and every
other client call is that scheduler's. The route decides, before the local
cache check, where the operation runs (the rule set, documented in
docs/upstream.md):

1. **overflow**: while more than ``rules.overflow_queue_depth`` actions
   (0 = never) routed to the local scheduler wait there (checking the cache
   or queued, not yet executing), new actions a local worker could run go
   upstream;
2. **unsatisfiable**: with ``rules.unsatisfiable``, an action whose
   platform (after the local property modifications) no local worker can
   ever satisfy (``explain_unsatisfiable``: ``OSFamily=windows``, a
   ``pool`` the laptop lacks, more CPUs or memory than any worker has, a
   property key the local scheduler does not know) goes upstream;
3. everything else runs locally (the route returns and ``local`` goes on as
   for any submission).

A forwarded action's inputs are copied to the upstream CAS first (only the
blobs it lacks), then it is executed there and its stages are reported to
the local operation, so they stream back as if local; nothing is downloaded
(the result's blobs are read through the fast_slow CAS when a client asks).
Forwarded operations say so in their ``message``; ``is_forwarded`` tells
them apart and ``forward_statistics()`` counts them.

Failure: the upstream never fails a build the laptop can run. When it is
unreachable (UNAVAILABLE, refused credentials, open circuit), overloaded
(RESOURCE_EXHAUSTED), times out (DEADLINE_EXCEEDED) or refuses the action
(FAILED_PRECONDITION, INVALID_ARGUMENT: an unregistered platform property,
say), an overflow action is brought back to run locally instead, and an
action no local worker can run fails with FAILED_PRECONDITION carrying the
upstream's reason; each cause (gRPC code) is logged once and counted
(``ForwardStatistics.fallbacks`` / ``refused``). Other upstream results,
including an action's own non-zero exit, are passed through unchanged.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

import trio

from lre.config import ForwardRulesSpec
from lre.errors import FailedPrecondition, LreError, NotFound, StatusCode, Unavailable
from lre.proto import re_pb2
from lre.scheduler._forward_upstream import UpstreamExecutor
from lre.scheduler._model import OperationSnapshot, RequestInfo, Stage
from lre.scheduler._routing import RoutedOperation
from lre.scheduler._scheduler import Scheduler
from lre.scheduler._statistics import SchedulerStatistics
from lre.upstream import UpstreamStatistics, UpstreamUnavailable

log = logging.getLogger(__name__)

#: Stages in which an operation routed here waits locally (the overflow rule).
_WAITING = frozenset({Stage.CACHE_CHECK, Stage.QUEUED})

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
    """One operation running upstream now (``lre_upstream_forwarded_inflight``)."""

    name: str
    stage: str
    reason: str
    started_at: float  # wall clock


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


@dataclass(slots=True)
class _Upstream:
    """An operation this forwarder runs upstream now."""

    operation: RoutedOperation
    reason: str
    started_at: float


class ForwardScheduler:
    """See the module docstring.

    - ``local``: the in-process scheduler that holds every operation and runs
      what stays local; the unsatisfiable rule asks it
      (``Scheduler.why_unsatisfiable``: its property types, modifications
      and registered workers).
    - ``executor``: runs forwarded actions upstream.
    """

    def __init__(self, local: Scheduler, executor: UpstreamExecutor, *, rules: ForwardRulesSpec):
        self.local = local
        self.executor = executor
        self.rules = rules
        self._running = False
        #: Names of the operations routed here that may still wait locally,
        #: oldest first (pruned as they are found executing or gone).
        self._routed_here: deque[str] = deque()
        self._upstream: dict[str, _Upstream] = {}
        self._forwarded: Counter[str] = Counter()
        self._counters: Counter[str] = Counter()
        self._fallbacks: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()
        self._logged_causes: set[str] = set()

    # ================================================================ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept submissions until cancelled; then the executor's upstream
        client is closed (forwarded operations end with the local scheduler,
        which cancels them on its way out)."""
        try:
            self._running = True
            task_status.started()
            await trio.sleep_forever()
        finally:
            self._running = False
            with trio.CancelScope(shield=True):
                await self.executor.client.aclose()

    # ================================================================ clients

    def submit(
        self, request: re_pb2.ExecuteRequest, *, request_info: RequestInfo | None = None
    ) -> OperationSnapshot:
        """Like ``Scheduler.submit``: validates the request, returns at CACHE_CHECK."""
        if not self._running:
            raise Unavailable("the scheduler is not running")
        copy = re_pb2.ExecuteRequest()
        copy.CopyFrom(request)

        async def route(operation: RoutedOperation) -> None:
            await self._route(operation, copy)

        return self.local.submit(copy, request_info=request_info, route=route)

    def watch(self, name: str) -> AbstractAsyncContextManager[AsyncIterator[OperationSnapshot]]:
        """Updates of ``name``; ``NotFound`` like ``Scheduler.watch``."""
        return self.local.watch(name)

    def get_operation(self, name: str) -> OperationSnapshot:
        return self.local.get_operation(name)

    def list_operations(self, instance_name: str | None = None) -> list[OperationSnapshot]:
        return self.local.list_operations(instance_name)

    def cancel(self, name: str) -> None:
        self.local.cancel(name)

    def delete(self, name: str) -> None:
        self.local.delete(name)

    def is_forwarded(self, name: str) -> bool:
        """Whether operation ``name`` runs (or ran) upstream."""
        return self.local.is_routed_away(name)

    # ================================================================ observers

    def statistics(self) -> SchedulerStatistics:
        """The local scheduler's statistics (forwarded work is not in them)."""
        return self.local.statistics()

    def forward_statistics(self) -> ForwardStatistics:
        inflight = tuple(
            ForwardedOperation(
                name=name,
                stage=up.operation.stage.name,
                reason=up.reason,
                started_at=up.started_at,
            )
            for name, up in self._upstream.items()
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

    async def _route(self, operation: RoutedOperation, request: re_pb2.ExecuteRequest) -> None:
        """Run ``operation`` upstream, or return to let the local scheduler run it."""
        reason = await self._forward_reason(operation)
        if operation.done:
            return
        if reason is None:
            self._routed_here.append(operation.name)
            return
        await self._run_upstream(operation, request, reason)

    async def _forward_reason(self, operation: RoutedOperation) -> str | None:
        """Why ``operation`` goes upstream, or None to run it locally.

        The overflow rule is judged last, with no await between it and the
        route's return: actions routed at the same moment then see each
        other among those waiting locally."""
        if self.rules.unsatisfiable:
            why = await self.local.why_unsatisfiable(operation.key)
            if why is not None:
                return f"unsatisfiable locally: {why}"
        depth = self.rules.overflow_queue_depth
        if depth > 0:
            waiting = self._waiting_locally(depth + 1)
            if waiting > depth:
                return f"overflow: {waiting} actions wait locally (limit {depth})"
        return None

    def _waiting_locally(self, enough: int) -> int:
        """How many operations routed here wait locally (not executing, not
        done), counted up to ``enough``; those found past waiting are dropped."""
        waiting = 0
        kept: deque[str] = deque()
        while self._routed_here and waiting < enough:
            name = self._routed_here.popleft()
            try:
                snapshot = self.local.get_operation(name)
            except NotFound:
                continue
            if not snapshot.done and snapshot.stage in _WAITING:
                kept.append(name)
                waiting += 1
        self._routed_here.extendleft(reversed(kept))
        return waiting

    async def _run_upstream(
        self, operation: RoutedOperation, request: re_pb2.ExecuteRequest, reason: str
    ) -> None:
        kind = reason.split(":", 1)[0].split()[0]
        message = f"forwarded to upstream {self.executor.client.name} ({reason})"
        operation.take_away(message)
        self._forwarded[kind] += 1
        self._upstream[operation.name] = _Upstream(operation, reason, time.time())
        log.info("operation %s: %s", operation.name, message)
        try:
            outcome = await self.executor.run(
                request, operation.key.action_digest, operation.set_stage
            )
        except LreError as error:
            if not _falls_back(error):
                self._counters["failed_upstream"] += 1
                raise
            self._upstream_declined(operation, kind, reason, error)
            return
        finally:
            self._upstream.pop(operation.name, None)
        if outcome.error is not None and _falls_back(outcome.error):
            self._upstream_declined(operation, kind, reason, outcome.error)
            return
        self._counters["completed_upstream"] += 1
        operation.finish(
            result=outcome.result,
            cached=outcome.cached_result,
            error=outcome.error,
            message=outcome.message,
        )

    def _upstream_declined(
        self, operation: RoutedOperation, kind: str, reason: str, error: LreError
    ) -> None:
        """The upstream could not or would not run ``operation``: bring it back
        to run locally when a local worker can (overflow), else fail it with
        FAILED_PRECONDITION carrying the upstream's reason. Each cause is
        logged once."""
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
                f"action {operation.key.action_digest} cannot run on a local worker ({reason}) "
                f"and upstream {self.executor.client.name} did not run it: {error.message}"
            ) from None
        self._fallbacks[cause] += 1
        self._counters["fell_back_local"] += 1
        operation.bring_back()
        self._routed_here.append(operation.name)
