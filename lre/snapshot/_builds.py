"""Builds: the history's actions grouped by the client's tool invocation id.

Bazel and Buck2 send a ``tool_invocation_id`` in every request's
``RequestMetadata``; one id is one build (one ``bazel build`` / ``buck2
build`` command). Actions that came without one are grouped under ``""``
("no id"). ``summarize_builds`` turns records into ``BuildSummary``s, the
one summary ``lre builds``, ``lre builds show``, the trace and the report
use.

A build's time is its span (``BuildSpan``): from its first request to its
last reply, over every call it made (capabilities, uploads and downloads
too, not only its actions), which is what the client waited on lre for; a
build without a span line (an older history) is timed by its actions. A
build whose newest span still had calls open and that a later start of lre
follows (``ServerStart``) was cut short: lre stopped without ending those
calls (``kill -9``, a crash); it is summarized even when none of its
actions ended. Another invocation with calls but no action (``bazel clean``
asks for the capabilities too) is no build.

A build's ``share`` is the fraction of the run time of every action that
ran during the build (between its first submission and its last end) that
was its own: 1.0 for a build alone, about 0.5 for each of two builds that
shared the machine fairly while both waited. ``share_waits`` counts its
actions that waited while another build, which had had less of the machine,
went first (``WaitReason.BUILD_SHARE``).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lre.snapshot._history import ActionRecord, BuildSpan, ServerStart, Source, WaitReason
from lre.snapshot._phases import Phase

__all__ = ["BuildSummary", "find_build", "newest_spans", "percentile", "summarize_builds"]


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (0.0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildSummary:
    """What one build did, from its actions' records.

    ``failed`` leaves out ``cancelled`` (stopped by the client or by lre's
    shutdown: not the action's failure); ``not_run`` never reached a worker.
    ``killed``: actions lre killed for their memory at least once;
    ``memory_retried``: those lre itself ran again one ladder step up;
    ``retried``: those lre ran again after an infrastructure failure;
    ``resubmitted``: actions the client sent again after they had ended in
    this build (its own retry, e.g. of a failure it took for a passing one).
    """

    invocation: str
    started_at: float
    ended_at: float
    client: str
    instance: str = ""
    actions: int = 0
    executed: int = 0
    execute_hits: int = 0
    lookup_hits: int = 0
    not_run: int = 0
    failed: int = 0
    killed: int = 0
    retried: int = 0
    frozen: int = 0
    queue_p50_s: float = 0.0
    queue_p95_s: float = 0.0
    lre_per_action_s: float = 0.0
    peak_rss_bytes: int = 0
    #: The longest-running executed actions (running phase; wall time breaks ties).
    slowest: tuple[ActionRecord, ...] = ()
    cancelled: int = 0
    memory_retried: int = 0
    resubmitted: int = 0
    #: The actions lre killed for their memory (at most ``slowest`` of them).
    killed_actions: tuple[ActionRecord, ...] = ()
    #: The actions that failed (an error or a non-zero exit; at most ``slowest``).
    failed_actions: tuple[ActionRecord, ...] = ()
    #: Where the largest figure came from (``MEMORY_*``; "" unknown).
    peak_memory_source: str = ""
    share: float = 1.0
    share_waits: int = 0
    #: The repository (or repositories) its client named; "" none.
    repository: str = ""
    #: lre stopped during it without ending its calls (``kill -9``, a crash).
    cut_short: bool = False

    @property
    def duration_s(self) -> float:
        return max(0.0, self.ended_at - self.started_at)

    @property
    def cache_hits(self) -> int:
        return self.execute_hits + self.lookup_hits

    def to_json(self) -> dict[str, object]:
        return {
            "invocation": self.invocation,
            "repository": self.repository,
            "cut_short": self.cut_short,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "duration_s": round(self.duration_s, 3),
            "client": self.client,
            "instance": self.instance,
            "actions": self.actions,
            "executed": self.executed,
            "cache_hits": {"execute": self.execute_hits, "get_action_result": self.lookup_hits},
            "not_run": self.not_run,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "killed": self.killed,
            "memory_retried": self.memory_retried,
            "retried": self.retried,
            "resubmitted": self.resubmitted,
            "frozen": self.frozen,
            "share": round(self.share, 3),
            "share_waits": self.share_waits,
            "queue_wait_s": {"p50": round(self.queue_p50_s, 4), "p95": round(self.queue_p95_s, 4)},
            "lre_per_action_s": round(self.lre_per_action_s, 5),
            "peak_rss_bytes": self.peak_rss_bytes,
            "peak_memory_source": self.peak_memory_source,
            "slowest": [
                {
                    "target": r.target,
                    "mnemonic": r.mnemonic,
                    "wall_s": round(r.wall_seconds, 3),
                    "running_s": round(r.phase_seconds(Phase.RUNNING), 3),
                    "peak_rss_bytes": r.peak_rss_bytes,
                    "memory_source": r.memory_source,
                }
                for r in self.slowest
            ],
            "killed_actions": [
                {
                    "target": r.target,
                    "mnemonic": r.mnemonic,
                    "running_s": round(r.phase_seconds(Phase.RUNNING), 3),
                    "peak_rss_bytes": r.peak_rss_bytes,
                    "kills": r.kills,
                    "kill_reason": r.kill_reason,
                    "killed_for_good": r.kill_ended,
                }
                for r in self.killed_actions
            ],
            "failed_actions": [
                {
                    "target": r.target,
                    "mnemonic": r.mnemonic,
                    "exit_code": r.exit_code,
                    "error": r.error,
                    "action": r.action,
                }
                for r in self.failed_actions
            ],
        }


def _summary(
    invocation: str, records: list[ActionRecord], slowest: int, span: BuildSpan | None
) -> BuildSummary:
    if not records:
        assert span is not None  # a build is made of records, a span, or both
        return BuildSummary(
            invocation=invocation,
            started_at=span.first_at,
            ended_at=span.last_at,
            client=span.tool,
            repository=span.repository,
        )
    executed = [r for r in records if r.source is Source.EXECUTED]
    queue: list[float] = []
    own: list[float] = []
    for record in executed:
        if not record.stamps:
            continue
        phases = {span.phase: span.seconds for span in record.spans}  # once per record
        queue.append(phases.get(Phase.QUEUED, 0.0))
        own.append(phases.get(Phase.STAGING, 0.0) + phases.get(Phase.STORING, 0.0))
    starts = [r.submitted_at or r.at for r in records]
    clients = sorted({r.tool for r in records if r.tool})
    repositories = sorted({r.repository for r in records if r.repository})
    if span is not None and span.repository and span.repository not in repositories:
        repositories.insert(0, span.repository)
    started_at = min(starts)
    ended_at = max(r.at for r in records)
    if span is not None:
        started_at = min(started_at, span.first_at)
        ended_at = max(ended_at, span.last_at)
    instances = sorted({r.instance for r in records if r.instance})
    # Slowest by their own running time: wall time counts the queue too, and
    # a build's queue wait would put the actions that waited first.
    by_wall = sorted(executed, key=lambda r: (-r.phase_seconds(Phase.RUNNING), -r.wall_seconds))
    seen: set[str] = set()
    resubmitted = 0
    for record in sorted(records, key=lambda r: r.submitted_at or r.at):
        if record.action and record.source is not Source.LOOKUP_HIT:
            if record.action in seen:
                resubmitted += 1
            seen.add(record.action)
    largest = max(records, key=lambda r: r.peak_rss_bytes)
    return BuildSummary(
        invocation=invocation,
        started_at=started_at,
        ended_at=ended_at,
        client=", ".join(clients),
        repository=", ".join(repositories),
        instance=", ".join(instances),
        actions=len(records),
        executed=len(executed),
        execute_hits=sum(1 for r in records if r.source is Source.EXECUTE_HIT),
        lookup_hits=sum(1 for r in records if r.source is Source.LOOKUP_HIT),
        not_run=sum(1 for r in records if r.source is Source.NOT_RUN),
        failed=sum(1 for r in records if r.failed),
        killed=sum(1 for r in records if r.kills),
        retried=sum(1 for r in records if r.retries),
        frozen=sum(1 for r in records if r.freezes),
        cancelled=sum(1 for r in records if r.cancelled),
        memory_retried=sum(1 for r in records if r.memory_retries),
        resubmitted=resubmitted,
        killed_actions=tuple(r for r in records if r.kills)[:slowest],
        failed_actions=tuple(r for r in records if r.failed)[:slowest],
        queue_p50_s=percentile(queue, 0.5),
        queue_p95_s=percentile(queue, 0.95),
        lre_per_action_s=sum(own) / len(own) if own else 0.0,
        peak_rss_bytes=largest.peak_rss_bytes,
        slowest=tuple(by_wall[:slowest]),
        peak_memory_source=largest.memory_source if largest.peak_rss_bytes else "",
        share_waits=sum(1 for r in records if WaitReason.BUILD_SHARE in r.waited_for),
    )


def _running_s(record: ActionRecord) -> float:
    return record.phase_seconds(Phase.RUNNING) if record.source is Source.EXECUTED else 0.0


def newest_spans(spans: Iterable[BuildSpan]) -> dict[str, BuildSpan]:
    """Each invocation's newest span line (the one written last wins)."""
    newest: dict[str, BuildSpan] = {}
    for span in spans:
        known = newest.get(span.invocation)
        if known is None or span.at >= known.at:
            newest[span.invocation] = span
    return newest


def summarize_builds(
    records: Iterable[ActionRecord],
    *,
    slowest: int = 10,
    spans: Iterable[BuildSpan] = (),
    starts: Iterable[ServerStart] = (),
) -> list[BuildSummary]:
    """One summary per invocation id, oldest build first, each with its share
    of the run time of every action that ended during it, timed by its span
    (see the module docstring) and marked ``cut_short`` as it says."""
    groups: dict[str, list[ActionRecord]] = {}
    ran: list[tuple[float, float]] = []
    for record in records:
        groups.setdefault(record.invocation, []).append(record)
        seconds = _running_s(record)
        if seconds > 0:
            ran.append((record.at, seconds))
    by_invocation = newest_spans(span for span in spans if span.invocation)
    last_start = max((start.at for start in starts), default=0.0)
    cut_short = {
        invocation
        for invocation, span in by_invocation.items()
        if span.open_calls and last_start > span.at
    }
    # A command with calls but no action (``bazel clean`` asks for the
    # capabilities too) is no build, unless lre died under it.
    for invocation in cut_short:
        groups.setdefault(invocation, [])
    builds = []
    for key, group in groups.items():
        build = _summary(key, group, slowest, by_invocation.get(key))
        if key in cut_short:
            build = dataclasses.replace(build, cut_short=True)
        builds.append(build)
    if len(builds) > 1:
        ran.sort()
        ends = [at for at, _ in ran]
        totals = [0.0]
        for _, seconds in ran:
            totals.append(totals[-1] + seconds)
        for i, build in enumerate(builds):
            own = sum(_running_s(r) for r in groups[build.invocation])
            low = bisect.bisect_left(ends, build.started_at)
            high = bisect.bisect_right(ends, build.ended_at)
            during = totals[high] - totals[low]
            if own > 0 and during > 0:
                builds[i] = dataclasses.replace(build, share=min(1.0, own / during))
    builds.sort(key=lambda b: b.started_at)
    return builds


def find_build(builds: Sequence[BuildSummary], wanted: str) -> BuildSummary:
    """``last`` (the newest), a whole invocation id, or a unique prefix of one.

    Raises ``LookupError`` with a message naming ``wanted`` when none or
    several match.
    """
    if not builds:
        raise LookupError("no builds recorded yet (lre records every action it serves)")
    if wanted in ("", "last"):
        return max(builds, key=lambda b: b.started_at)
    exact = [b for b in builds if b.invocation == wanted]
    if exact:
        return exact[0]
    matching = [b for b in builds if b.invocation.startswith(wanted)]
    if len(matching) == 1:
        return matching[0]
    if not matching:
        raise LookupError(f"no build {wanted!r} in the history (see `lre builds`)")
    raise LookupError(f"build {wanted!r} is ambiguous: {len(matching)} ids start with it")
