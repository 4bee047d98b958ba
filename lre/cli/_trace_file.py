"""A build as Chrome trace-event JSON (the format of Bazel's ``--profile``).

The layout (a track per running slot, the queue and cache-hit tracks, kills
and counters) is in docs/observability.md, "Trace and report". An action
killed for good (``kill_ended``) keeps its slice, up to its kill; a cancelled
one is a slice up to its cancellation with an instant ``cancelled`` at its
end. Timestamps are microseconds since the build's first request.
"""

from __future__ import annotations

from typing import Any

from lre.cli._build_data import BuildData, slot_actions
from lre.snapshot import BuildSummary, Phase, Source

__all__ = ["chrome_trace"]

_PID = 1
_QUEUE_TID = 1000
_CACHE_TID = 1001


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 1)


def _dur(start: float, end: float, origin: float) -> float:
    """``end - start`` as the difference of the two rounded timestamps, so a
    phase ends exactly where its action does, never 0.1 us after it."""
    return max(0.0, round(_us(end - origin) - _us(start - origin), 1))


def chrome_trace(build: BuildData) -> dict[str, Any]:
    """The trace document (``json.dump`` it); see the module docstring."""
    origin = build.origin
    summary = build.summary
    events: list[dict[str, Any]] = [
        _meta("process_name", 0, _process_name(summary)),
        _meta("thread_name", _QUEUE_TID, "queue"),
        _meta("thread_name", _CACHE_TID, "cache hits"),
    ]
    slotted = slot_actions(build.actions)
    for slot in sorted({s.slot for s in slotted}):
        events.append(_meta("thread_name", slot + 1, f"slot {slot + 1}"))
        events.append(
            {
                "name": "thread_sort_index",
                "ph": "M",
                "pid": _PID,
                "tid": slot + 1,
                "args": {"sort_index": slot},
            }
        )
    for index, placed in enumerate(slotted):
        record = placed.record
        tid = placed.slot + 1
        name = record.target or record.mnemonic or record.action[:12]
        args: dict[str, Any] = {
            "target": record.target,
            "mnemonic": record.mnemonic,
            "exit_code": record.exit_code,
            "error": record.error,
            "peak_rss_bytes": record.peak_rss_bytes,
            "memory_source": record.memory_source,
            "reserved_millicpus": record.reserved_millicpus,
            "reserved_memory_bytes": record.reserved_memory_bytes,
            "waited_for": list(record.waited_for),
            "attempts": record.attempts,
            "kills": record.kills,
            "kill_reason": record.kill_reason,
            "killed_for_good": record.kill_ended,
            "memory_retries": record.memory_retries,
            "retries": record.retries,
            "cancelled": record.cancelled,
        }
        for span in record.spans:
            args[f"{span.phase.value}_ms"] = round(span.seconds * 1000, 3)
        events.append(
            {
                "name": name,
                "cat": record.mnemonic or "action",
                "ph": "X",
                "ts": _us(placed.start - origin),
                "dur": _dur(placed.start, placed.end, origin),
                "pid": _PID,
                "tid": tid,
                "args": args,
            }
        )
        for span in record.spans:
            if span.phase is Phase.QUEUED:
                for ph, at in (("b", span.start), ("e", span.end)):
                    events.append(
                        {
                            "name": name,
                            "cat": "queued",
                            "ph": ph,
                            "ts": _us(at - origin),
                            "pid": _PID,
                            "tid": _QUEUE_TID,
                            "id": index + 1,
                            "args": {"waited_for": list(record.waited_for)} if ph == "b" else {},
                        }
                    )
                continue
            events.append(
                {
                    "name": span.phase.value,
                    "cat": "phase",
                    "ph": "X",
                    "ts": _us(span.start - origin),
                    "dur": _dur(span.start, span.end, origin),
                    "pid": _PID,
                    "tid": tid,
                    "args": {"target": record.target},
                }
            )
        if record.cancelled:
            events.append(
                _instant(
                    f"{name}: cancelled",
                    "cancel",
                    _us(placed.end - origin),
                    tid,
                    {"target": record.target},
                )
            )
        if record.kills or record.retries:
            events.append(
                _instant(
                    f"{name}: {record.kills} kill(s) for memory, {record.retries} "
                    "infrastructure retry(ies)",
                    "kill",
                    _us(placed.start - origin),
                    tid,
                    {"kills": record.kills, "retries": record.retries},
                )
            )
    for record in build.actions:
        for killed in record.killed_at:
            events.append(
                _instant(
                    f"killed {record.target or record.mnemonic} (memory)",
                    "kill",
                    _us(max(0.0, killed - origin)),
                    0,
                    {
                        "target": record.target,
                        "peak_rss_bytes": record.peak_rss_bytes,
                        "reason": record.kill_reason,
                        "killed_for_good": record.kill_ended,
                    },
                    scope="g",
                )
            )
        if record.source in (Source.EXECUTE_HIT, Source.LOOKUP_HIT):
            events.append(
                _instant(
                    record.target or record.mnemonic or record.action[:12],
                    record.source.value,
                    _us(record.at - origin),
                    _CACHE_TID,
                    {"target": record.target, "mnemonic": record.mnemonic},
                )
            )
    for sample in build.samples:
        ts = _us(max(0.0, sample.at - origin))
        events.append(
            {
                "name": "CPU",
                "ph": "C",
                "ts": ts,
                "pid": _PID,
                "tid": 0,
                "args": {
                    "host_percent": sample.cpu_percent,
                    "reserved_cpus": sample.reserved_millicpus / 1000,
                },
            }
        )
        events.append(
            {
                "name": "Memory (MiB)",
                "ph": "C",
                "ts": ts,
                "pid": _PID,
                "tid": 0,
                "args": {
                    "host_used": round(sample.memory_used_bytes / 2**20, 1),
                    "reserved": round(sample.reserved_memory_bytes / 2**20, 1),
                },
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "invocation": summary.invocation,
            "repository": summary.repository,
            "cut_short": summary.cut_short,
            "duration_s": round(summary.duration_s, 3),
            "client": summary.client,
            "instance": summary.instance,
            "started_at": summary.started_at,
            "phases": [p.value for p in Phase],
        },
    }


def _process_name(summary: BuildSummary) -> str:
    """``lre build <id> (<repository>)``, as Perfetto names the trace's process."""
    name = f"lre build {summary.invocation or '(no id)'}"
    if summary.repository:
        name += f" ({summary.repository})"
    return name + (" cut short" if summary.cut_short else "")


def _instant(
    name: str, category: str, ts: float, tid: int, args: dict[str, Any], *, scope: str = "t"
) -> dict[str, Any]:
    """An instant event (``ph`` "i") on thread ``tid``; ``scope`` "g": on every thread."""
    return {
        "name": name,
        "cat": category,
        "ph": "i",
        "s": scope,
        "ts": ts,
        "pid": _PID,
        "tid": tid,
        "args": args,
    }


def _meta(name: str, tid: int, value: str) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": _PID, "tid": tid, "args": {"name": value}}
