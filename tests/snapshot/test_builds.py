"""What ``summarize_builds`` counts: cancelled apart from failed, kills apart
from lre's own reruns, and a client's re-submission apart from both."""

from __future__ import annotations

from lre.snapshot import ActionRecord, Source, summarize_builds


def _record(n: int, at: float, action: str, **fields: object) -> ActionRecord:
    values: dict[str, object] = {
        "at": at,
        "source": Source.EXECUTED,
        "invocation": "b",
        "target": f"//t:{n}",
        "action": action,
        "submitted_at": at - 1.0,
    }
    values.update(fields)
    return ActionRecord(**values)  # type: ignore[arg-type]


def test_a_build_tells_cancels_kills_reruns_and_resubmissions_apart() -> None:
    records = [
        _record(1, 10.0, "a1", exit_code=0),
        # killed over the ceiling, lre gave up: failed (137), killed, not rerun by lre
        _record(2, 11.0, "a2", exit_code=137, kills=1, kill_ended=True, attempts=1),
        # the client sent the very same action again after that: a re-submission
        _record(2, 14.0, "a2", exit_code=137, kills=1, kill_ended=True, attempts=1),
        # killed once, run again one ladder step up by lre, then fine
        _record(3, 12.0, "a3", exit_code=0, kills=1, attempts=2),
        _record(4, 13.0, "a4", error="CANCELLED"),
        _record(5, 13.0, "a5", error="CANCELLED", source=Source.NOT_RUN),
        _record(6, 13.0, "a6", error="DEADLINE_EXCEEDED"),
    ]
    (build,) = summarize_builds(records)
    assert (build.failed, build.cancelled, build.not_run) == (3, 2, 1)
    assert (build.killed, build.memory_retried, build.resubmitted) == (3, 1, 1)
    assert [r.target for r in build.killed_actions] == ["//t:2", "//t:2", "//t:3"]
    data = build.to_json()
    assert (data["cancelled"], data["memory_retried"], data["resubmitted"]) == (2, 1, 1)
    assert data["killed_actions"][0]["killed_for_good"] is True  # type: ignore[index]
