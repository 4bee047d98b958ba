"""``HistoryRecorder``: keeps every finished action in lre's state directory.

The scheduler hands it a ``RecordBuilder`` per operation that ends
(``record_later``, on the Trio thread) and the ``GetActionResult``
interceptor an ``ActionRecord`` per hit (``record``, on the gRPC thread).
Both only append to a queue: everything else is done for all queued
records at once by ``absorb`` (build the records, count them into the
phase histograms and build lines, keep them for writing), which the flush
runs once a second and the readers (``phase_histograms``, ``build_lines``)
run first, so what they show includes every action that has ended.
``flush`` may also be called by a reader (``lre builds`` asks the running
lre through its status listener): once a client has its last reply, the
file holds every action of it and the build's span.
Work done once a second for a batch costs a fraction of the same work done
per action between two RPCs, where every action meets cold caches.

``run`` (a Trio task) writes a ``ServerStart`` line first, then what
``absorb`` kept as JSON lines to the ring file (``lre.snapshot.HistoryFile``)
in a worker thread once a second, with the span of each build whose calls
moved (``lre.service.InvocationSpans``: first request, last reply, calls
open) and,
in the same thread, samples the host (CPU %, memory in use) for the TUI
and, while actions run, for the history (``HostSample`` lines: the
report's CPU and memory over time; the reservations in them are read on
the Trio thread, where the schedulers live).

Failure: a write that fails (a full disk, a read-only state dir) is logged
once, the buffered lines are dropped and recording pauses for
``PAUSE_AFTER_ERROR_S``; serving goes on untouched. What waits to be
written is bounded (``MAX_BUFFERED`` lines; the oldest are dropped and
counted in ``dropped``) so a stuck disk cannot grow lre's memory; the queue
in front of ``absorb`` is bounded too (a producer that finds
``MAX_PENDING`` queued absorbs them itself). A builder that raises (a bug)
is logged and its record dropped.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

import psutil
import trio

from lre.errors import out_of_descriptors
from lre.scheduler import RecordBuilder
from lre.service import InvocationSpans
from lre.snapshot import (
    BOUNDARIES,
    PHASE_BUCKETS_S,
    PHASES,
    ActionRecord,
    BuildLine,
    BuildSpan,
    HistoryFile,
    HistoryLine,
    HostSample,
    HostUsage,
    PhaseHistogram,
    ServerStart,
    Source,
)
from lre.worker import SkipLog, using_reserve

__all__ = ["HistoryRecorder", "Reserved"]

log = logging.getLogger(__name__)

#: ``() -> (reserved millicpus, reserved memory bytes, running actions)``.
Reserved = Callable[[], tuple[int, int, int]]

#: One encoder for every line (``json.dumps`` with options builds one per call).
_ENCODE = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode
_PHASE_BOUNDS = tuple((phase, *BOUNDARIES[phase]) for phase in PHASES)


@dataclass(slots=True)
class _Build:
    """A build's counts so far; its fields are ``BuildLine``'s but ``running``."""

    invocation: str
    client: str
    started_at: float
    ended_at: float
    repository: str = ""
    executed: int = 0
    cache_hits: int = 0
    failed: int = 0
    killed: int = 0
    cancelled: int = 0

    def ended_actions(self) -> int:
        return self.executed + self.cache_hits + self.failed + self.cancelled


class HistoryRecorder:
    """See the module docstring. ``directory`` is lre's state dir (or a
    ``history`` directory in it), ``max_bytes`` bounds both ring segments."""

    FLUSH_INTERVAL_S = 1.0
    PAUSE_AFTER_ERROR_S = 30.0
    MAX_BUFFERED = 20_000
    #: Producers absorb the queue themselves past this (a flush that is stuck).
    MAX_PENDING = 2_000
    #: Without spans: a build with no new action for this long is no longer
    #: "current".
    BUILD_IDLE_S = 10.0
    #: With spans: a build with no call open for this long is no longer
    #: "current" (the gap between two calls of a running build is shorter).
    SPAN_IDLE_S = 1.5
    #: Header lines of builds running at once (the rest are counted in the last).
    MAX_RUNNING_LINES = 4
    KEPT_BUILDS = 16
    #: Failed actions of one build logged one by one.
    LOGGED_FAILURES = 10

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int,
        reserved: Reserved | None = None,
        spans: InvocationSpans | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.file = HistoryFile(directory, max_bytes)
        self._reserved = reserved
        self.spans = spans
        self._clock = clock
        self._lock = threading.Lock()
        #: Held for a whole flush: a reader's flush and the periodic one
        #: write one after the other, in order.
        self._write_lock = threading.Lock()
        #: Appended by the producers without the lock (``deque.append`` is atomic).
        self._pending: deque[HistoryLine | RecordBuilder] = deque()
        #: Absorbed, waiting to be written.
        self._buffer: deque[HistoryLine] = deque(maxlen=self.MAX_BUFFERED)
        self._paused_until = 0.0
        #: Samples skipped for want of file descriptors (logged once).
        self._skips = SkipLog("history: host sample")
        self._counts = {phase: [0] * (len(PHASE_BUCKETS_S) + 1) for phase in PHASES}
        self._sums = dict.fromkeys(PHASES, 0.0)
        self._builds: OrderedDict[str, _Build] = OrderedDict()
        #: Builds whose start / end lre's log has (insertion-ordered, bounded).
        self._logged_started: dict[str, None] = {}
        self._logged_ended: dict[str, None] = {}
        #: The workers' memory budget together (0: none), in each host sample.
        self.memory_budget_bytes = 0
        self.recorded = 0
        self.dropped = 0
        self.host: HostUsage | None = None

    # ------------------------------------------------------------ producers

    def record(self, record: HistoryLine | RecordBuilder) -> None:
        """Queue ``record``, or the record a ``RecordBuilder`` makes (it is
        called in ``absorb``); any thread, never raises for a valid record."""
        self._pending.append(record)
        if len(self._pending) > self.MAX_PENDING:
            with self._lock:
                self._absorb()

    #: The scheduler's hook (a builder per ended operation): the same queue.
    record_later = record

    def _absorb(self) -> None:
        """(Lock held.) Build, count and keep for writing every queued record."""
        pending, buffer = self._pending, self._buffer
        counts, sums = self._counts, self._sums
        while pending:
            item = pending.popleft()
            if not isinstance(item, ActionRecord | HostSample | BuildSpan | ServerStart):
                try:
                    item = item()
                except Exception:
                    log.exception("building a history record failed; it is dropped")
                    self.dropped += 1
                    continue
            if len(buffer) == buffer.maxlen:
                self.dropped += 1
            buffer.append(item)
            if not isinstance(item, ActionRecord):
                continue
            self.recorded += 1
            stamps = item.stamps
            if stamps:
                for phase, first, last in _PHASE_BOUNDS:  # as lre.snapshot.phase_spans
                    start = stamps.get(first)
                    end = stamps.get(last)
                    if start and end:
                        seconds = end - start if end > start else 0.0
                        counts[phase][bisect.bisect_left(PHASE_BUCKETS_S, seconds)] += 1
                        sums[phase] += seconds
            self._count_build(item)

    def _count_build(self, record: ActionRecord) -> None:
        build = self._builds.get(record.invocation)
        if build is None:
            start = record.submitted_at or record.at
            build = self._keep(
                _Build(record.invocation, record.tool, start, record.at, record.repository)
            )
        build.ended_at = max(build.ended_at, record.at)
        if record.repository and not build.repository:
            build.repository = record.repository
        if record.source is Source.EXECUTED:
            build.executed += 1
        elif record.source in (Source.EXECUTE_HIT, Source.LOOKUP_HIT):
            build.cache_hits += 1
        if record.failed:
            build.failed += 1
            if build.failed <= self.LOGGED_FAILURES:
                self._log_failure(record, build)
        if record.cancelled:
            build.cancelled += 1
        if record.kills:
            build.killed += 1

    def _keep(self, build: _Build) -> _Build:
        """(Lock held.) Keep ``build``, forgetting the oldest past ``KEPT_BUILDS``."""
        self._builds[build.invocation] = build
        while len(self._builds) > self.KEPT_BUILDS:
            self._builds.popitem(last=False)
        return build

    def _log_failure(self, record: ActionRecord, build: _Build) -> None:
        """One log line per failed action (the first ``LOGGED_FAILURES`` of a
        build; the build's end line counts them all)."""
        outcome = (
            f"exit code {record.exit_code}" if record.exit_code else record.error or "an error"
        )
        if record.kill_ended:
            outcome += " (killed for its memory, lre gave up on it)"
        more = " (the last one logged for it)" if build.failed == self.LOGGED_FAILURES else ""
        named = record.target or record.mnemonic
        log.info(
            "action failed: %s with %s, build %s%s%s%s",
            record.name,
            outcome,
            record.invocation[:8] or "(no id)",
            f" of {build.repository}" if build.repository else "",
            f" (action {record.action[:12]})" if named and record.action else "",
            more,
        )

    def _has_actions(self, invocation: str) -> bool:
        """Whether an action of ``invocation`` ended (its build line counts one)."""
        with self._lock:
            b = self._builds.get(invocation)
            return b is not None and b.ended_actions() > 0

    def _log_builds(self, spans: Mapping[str, BuildSpan]) -> None:
        """(Write lock held.) A log line when a build is first seen working
        (a flush finds a call of it open, or an action of it ended: ``bazel
        clean``'s lone capabilities call is no build) and one when it has had
        no call open for ``SPAN_IDLE_S`` since, with what it did."""
        now = self._clock()
        for invocation, span in spans.items():
            name = f"{invocation[:8]}{f' of {span.repository}' if span.repository else ''}"
            if invocation not in self._logged_started:
                if not span.open_calls and not self._has_actions(invocation):
                    continue
                self._logged_started[invocation] = None
                log.info(
                    "build %s started %.1f s ago (%s)",
                    name,
                    max(0.0, now - span.first_at),
                    span.tool or "unknown client",
                )
            idle = not span.open_calls and now - span.last_at >= self.SPAN_IDLE_S
            if idle and invocation not in self._logged_ended:
                self._logged_ended[invocation] = None
                with self._lock:
                    build = self._builds.get(invocation)
                    counts = (
                        (build.executed, build.cache_hits, build.failed, build.cancelled)
                        if build is not None
                        else (0, 0, 0, 0)
                    )
                log.info(
                    "build %s ended after %.1f s: %d run, %d from the cache, %d failed, "
                    "%d cancelled",
                    name,
                    span.last_at - span.first_at,
                    *counts,
                )
            elif not idle:
                self._logged_ended.pop(invocation, None)
        for seen in (self._logged_started, self._logged_ended):
            while len(seen) > 4 * self.KEPT_BUILDS:
                del seen[next(iter(seen))]

    # ------------------------------------------------------------ readers

    def phase_histograms(self) -> tuple[PhaseHistogram, ...]:
        """Every ended action's phases so far (absorbs the queue first)."""
        with self._lock:
            self._absorb()
            return tuple(
                PhaseHistogram(
                    phase=phase,
                    bucket_counts=tuple(self._counts[phase][: len(PHASE_BUCKETS_S)]),
                    count=sum(self._counts[phase]),
                    sum_seconds=self._sums[phase],
                )
                for phase in PHASES
            )

    def build_lines(
        self, active: Mapping[str, tuple[str, float]] | None = None
    ) -> tuple[BuildLine, ...]:
        """A line per build running now (at most ``MAX_RUNNING_LINES``, oldest
        first) and one for the newest build that ended, when there is one.
        ``active`` maps the invocation id of each build with an action
        running now to (client, when that action started): such a build is
        current even before its first action ends (it is kept from then on)
        and through a long action with nothing else ending.

        With spans (``InvocationSpans``) a build runs while it has a call
        open (or ended one less than ``SPAN_IDLE_S`` ago) and is timed from
        its first request to its last reply, as ``lre builds`` times it;
        without, it runs until no action of it ended for ``BUILD_IDLE_S``."""
        now = self._clock()
        active = active or {}
        spans = self.spans.current() if self.spans is not None else {}
        with self._lock:
            self._absorb()
            for invocation, (client, started_at) in active.items():
                build = self._builds.get(invocation)
                if build is None:
                    self._keep(_Build(invocation, client, started_at, started_at))
                elif started_at < build.started_at:
                    build.started_at = started_at
            for invocation, span in spans.items():
                build = self._builds.get(invocation)
                if build is None:
                    build = self._keep(_Build(invocation, span.tool, span.first_at, span.last_at))
                build.started_at = min(build.started_at, span.first_at)
                build.ended_at = max(build.ended_at, span.last_at)
                build.repository = build.repository or span.repository
                build.client = build.client or span.tool

            def running(build: _Build) -> bool:
                if build.invocation in active:
                    return True
                span = spans.get(build.invocation)
                if span is not None:
                    return bool(span.open_calls) or now - span.last_at < self.SPAN_IDLE_S
                return now - build.ended_at < self.BUILD_IDLE_S

            current = sorted(
                (b for b in self._builds.values() if running(b)), key=lambda b: b.started_at
            )[: self.MAX_RUNNING_LINES]
            # A command that ended without an action (``bazel clean`` asks
            # for the capabilities too) is no "last build".
            ended = [b for b in self._builds.values() if not running(b) and b.ended_actions()]
            shown = [(b, True) for b in current]
            if ended:
                shown.append((max(ended, key=lambda b: b.ended_at), False))
            return tuple(BuildLine(**asdict(b), running=is_running) for b, is_running in shown)

    # ------------------------------------------------------------ the task

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Flush and sample every ``FLUSH_INTERVAL_S`` until cancelled; the
        last lines are written on the way out."""
        psutil.cpu_percent(None)  # the first call only starts the measurement
        try:
            # Opened up front: lre's descriptors do not grow at the first flush.
            await trio.to_thread.run_sync(self.file.open)
        except OSError as error:
            log.warning(
                "history: cannot open %s (%s); the first flush tries again",
                self.file.current,
                error.strerror or error,
            )
        self.record(ServerStart(at=self._clock(), pid=os.getpid()))
        task_status.started()
        try:
            while True:
                await trio.sleep(self.FLUSH_INTERVAL_S)
                # The schedulers' figures on their thread; the host's (psutil
                # parses /proc, ~0.3 ms) and the flush off it.
                reserved = self._reserved() if self._reserved else (0, 0, 0)
                await trio.to_thread.run_sync(self._sample_and_flush, reserved)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.close)

    def _sample_and_flush(self, reserved: tuple[int, int, int]) -> None:
        """(A worker thread.) Sample the host, then flush. Out of file
        descriptors even with lre's reserve, the sample is skipped (logged
        once, ``SkipLog``) and the flush goes on."""
        try:
            using_reserve(lambda: self._sample(reserved))
        except OSError as error:
            if not out_of_descriptors(error):
                raise
            self._skips.skip(error)
        else:
            self._skips.ok()
        self.flush()

    def _sample(self, reserved: tuple[int, int, int]) -> None:
        memory = psutil.virtual_memory()
        cpu = psutil.cpu_percent(None)
        used = int(memory.total - memory.available)
        self.host = HostUsage(cpu, psutil.cpu_count() or 1, used, int(memory.total))
        millicpus, reserved_memory, running = reserved
        if not running and not self._pending and not self._buffer:
            return
        self._pending.append(
            HostSample(
                at=self._clock(),
                cpu_percent=cpu,
                memory_used_bytes=used,
                memory_total_bytes=int(memory.total),
                reserved_millicpus=millicpus,
                reserved_memory_bytes=reserved_memory,
                running=running,
                memory_budget_bytes=self.memory_budget_bytes,
            )
        )

    def flush(self) -> None:
        """Write what is buffered (in a worker thread); see the module
        docstring for what happens when the write fails."""
        with self._write_lock:
            self._flush()

    def _flush(self) -> None:
        """(Write lock held.) ``flush``."""
        paused = time.monotonic() < self._paused_until
        if self.spans is not None:
            self._pending.extend(self.spans.changed())
        with self._lock:
            self._absorb()
        if self.spans is not None:
            self._log_builds(self.spans.current())
        with self._lock:
            records = list(self._buffer)
            self._buffer.clear()
            if paused:
                self.dropped += len(records)
        if not records or paused:
            return
        lines = [_ENCODE(record.to_json()) for record in records]
        try:
            self.file.append(lines)
        except OSError as error:
            self._paused_until = time.monotonic() + self.PAUSE_AFTER_ERROR_S
            self.file.close()
            with self._lock:
                self.dropped += len(lines)
            log.warning(
                "history: cannot write to %s (%s); %d record(s) dropped, recording pauses "
                "for %g s (serving is not affected)",
                self.file.current,
                error.strerror or error,
                len(lines),
                self.PAUSE_AFTER_ERROR_S,
            )

    def close(self) -> None:
        """Write the rest and close the file (errors as in ``flush``)."""
        self._paused_until = 0.0
        self.flush()
        self.file.close()
