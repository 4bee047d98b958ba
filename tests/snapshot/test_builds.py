"""What ``summarize_builds`` counts: cancelled apart from failed, kills apart
from lre's own reruns, and a client's re-submission apart from both."""

from __future__ import annotations

from lre.snapshot import ActionRecord, BuildSpan, ServerStart, Source, summarize_builds


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


def test_a_build_is_timed_by_its_span_and_named_by_its_repository() -> None:
    """First request to last reply (the newest span line wins), the repository
    from the span or its actions; calls without an action make no build,
    unless lre died under them."""
    records = [_record(1, 20.0, "a1", exit_code=0, repository="app-1")]
    spans = [
        BuildSpan(at=15.0, invocation="b", first_at=12.0, last_at=15.0, open_calls=2),
        BuildSpan(at=25.0, invocation="b", first_at=12.0, last_at=24.5),
        BuildSpan(at=30.0, invocation="clean", first_at=28.0, last_at=29.0, repository="web-2"),
        BuildSpan(at=31.0, invocation="died", first_at=30.5, last_at=30.9, open_calls=1),
    ]
    (built,) = summarize_builds(records, spans=spans)  # `bazel clean`'s calls: no build
    assert (built.started_at, built.ended_at, built.repository) == (12.0, 24.5, "app-1")
    assert built.duration_s == 12.5 and not built.cut_short
    assert built.to_json()["repository"] == "app-1"
    _, died = summarize_builds(records, spans=spans, starts=[ServerStart(at=40.0)])
    assert (died.invocation, died.actions, died.cut_short) == ("died", 0, True)


def test_a_build_with_calls_open_when_lre_died_is_cut_short_after_the_next_start() -> None:
    spans = [
        BuildSpan(at=40.0, invocation="ended", first_at=30.0, last_at=39.0),
        BuildSpan(at=50.0, invocation="killed", first_at=41.0, last_at=49.0, open_calls=3),
    ]
    records = [
        _record(1, 45.0, "a1", invocation="killed", exit_code=0),
        _record(2, 38.0, "a2", invocation="ended", exit_code=0),
    ]
    before = {b.invocation: b.cut_short for b in summarize_builds(records, spans=spans)}
    assert before == {"killed": False, "ended": False}  # lre may still run it
    after = summarize_builds(records, spans=spans, starts=[ServerStart(at=60.0, pid=7)])
    assert {b.invocation: b.cut_short for b in after} == {"killed": True, "ended": False}
    again = [*spans, BuildSpan(at=70.0, invocation="killed", first_at=41.0, last_at=69.0)]
    resumed = summarize_builds(records, spans=again, starts=[ServerStart(at=60.0)])
    assert not any(b.cut_short for b in resumed)  # its client came back and finished it
