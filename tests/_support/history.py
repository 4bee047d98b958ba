"""A history written the way lre writes it, for the command tests."""

from __future__ import annotations

import json
from pathlib import Path

from lre.snapshot import ActionRecord, HistoryFile, HostSample, Source

INVOCATION = "5f0c3a52-8d7e-4a53-9d55-1c0f2b9e7a10"
OTHER = "a1b2c3d4-0000-4000-8000-000000000000"


def action(n: int, start: float, *, slot_seconds: float = 1.0, **fields: object) -> ActionRecord:
    """Executed action ``n`` submitted at ``start``, queued 0.1 s, staged 0.05 s,
    running ``slot_seconds``, storing 0.05 s."""
    stamps = {
        "queued": start,
        "worker_start": start + 0.1,
        "execution_start": start + 0.15,
        "execution_completed": start + 0.15 + slot_seconds,
        "worker_completed": start + 0.2 + slot_seconds,
    }
    values: dict[str, object] = {
        "at": start + 0.2 + slot_seconds,
        "source": Source.EXECUTED,
        "invocation": INVOCATION,
        "tool": "bazel 7.1.0",
        "instance": "main",
        "target": f"//pkg:t{n}",
        "mnemonic": "CppCompile",
        "action": f"{n:064x}",
        "worker": "local",
        "exit_code": 0,
        "submitted_at": start,
        "reserved_millicpus": 1000,
        "reserved_memory_bytes": 256 << 20,
        "peak_rss_bytes": (n + 1) << 20,
        "attempts": 1,
        "stamps": stamps,
    }
    values.update(fields)
    return ActionRecord(**values)  # type: ignore[arg-type]


def write_history(state: Path, t0: float = 1_800_000_000.0) -> list[ActionRecord]:
    """An older build of one action, then a build of 6 executed actions (two
    at a time; one killed twice, one failed, one waited for memory) and 2 hits."""
    records = [action(0, t0 - 100, invocation=OTHER, tool="buck2 2024-05-01")]
    for n in range(6):
        extra: dict[str, object] = {}
        if n == 2:
            extra = {
                "kills": 2,
                "attempts": 3,
                "waited_for": ("memory_budget",),
                "killed_at": (t0 + 1.5, t0 + 1.8),
            }
        if n == 4:
            extra = {"exit_code": 1}
        records.append(action(n + 1, t0 + (n // 2) * 1.5, slot_seconds=1.0 + n * 0.1, **extra))
    records.append(
        ActionRecord(
            at=t0 + 0.01,
            source=Source.LOOKUP_HIT,
            invocation=INVOCATION,
            target="//pkg:cached",
            mnemonic="Genrule",
            exit_code=0,
            submitted_at=t0,
        )
    )
    records.append(
        ActionRecord(
            at=t0 + 0.02,
            source=Source.EXECUTE_HIT,
            invocation=INVOCATION,
            target="//pkg:cached2",
            submitted_at=t0,
        )
    )
    samples = [
        HostSample(t0 + i * 0.5, 40.0 + i, (3 << 30) + i * (1 << 20), 8 << 30, 2000, 512 << 20, 2)
        for i in range(10)
    ]
    lines = [json.dumps(r.to_json()) for r in records] + [json.dumps(s.to_json()) for s in samples]
    history = HistoryFile(state, 1 << 20)
    history.append(lines)
    history.close()
    return records


KILLED_BUILD = "4b1d0000-0000-4000-8000-00000000c0de"
CANCELLED_BUILD = "c0c0c0c0-0000-4000-8000-000000000000"


def write_killed_and_cancelled(state: Path, t0: float = 1_800_000_000.0) -> None:
    """Two builds as lre records them: one where lre killed an action over its
    hard ceiling for good (its result: exit 137, its run's stamps) and killed
    another once before running it again; one stopped with Ctrl-C (two runs
    cancelled under way, two never started, one done)."""
    doomed_at = t0 + 0.15 + 1.2
    killed = [
        action(1, t0, invocation=KILLED_BUILD),
        action(
            2,
            t0,
            invocation=KILLED_BUILD,
            slot_seconds=1.2,
            exit_code=137,
            kills=1,
            kill_ended=True,
            kill_reason="over the hard ceiling",
            killed_at=(doomed_at,),
            peak_rss_bytes=650 << 20,
        ),
        action(
            3,
            t0 + 0.5,
            invocation=KILLED_BUILD,
            kills=1,
            attempts=2,
            kill_reason="host MemAvailable under the hard floor",
            killed_at=(t0 + 0.7,),
        ),
    ]
    cancelled = [action(4, t0 + 100, invocation=CANCELLED_BUILD)]
    for n in (5, 6):
        start = t0 + 100.5
        cancelled.append(
            ActionRecord(
                at=start + 2.0,
                source=Source.EXECUTED,
                invocation=CANCELLED_BUILD,
                target=f"//pkg:t{n}",
                mnemonic="Genrule",
                action=f"{n:064x}",
                error="CANCELLED",
                submitted_at=start,
                attempts=0,
                stamps={"queued": start, "worker_start": start + 0.1},
            )
        )
    for n in (7, 8):
        cancelled.append(
            ActionRecord(
                at=t0 + 102.5,
                source=Source.NOT_RUN,
                invocation=CANCELLED_BUILD,
                target=f"//pkg:t{n}",
                action=f"{n:064x}",
                error="CANCELLED",
                submitted_at=t0 + 100.6,
            )
        )
    history = HistoryFile(state, 1 << 20)
    history.append([json.dumps(r.to_json()) for r in (*killed, *cancelled)])
    history.close()
