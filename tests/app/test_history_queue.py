"""The recorder's queue: producers only queue, the flush and the readers build.

What the scheduler hands the recorder is built, counted and kept for writing
once a second for all queued actions at once (``HistoryRecorder.absorb``),
not per action on the Trio thread; the readers absorb first, so the TUI's
build lines and ``/metrics`` see every action that has ended.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
import trio
import trio.testing

from lre.app._history import HistoryRecorder
from lre.snapshot import ActionRecord, HostSample, Phase, Source, read_history


def _executed(n: int, invocation: str = "inv") -> ActionRecord:
    return ActionRecord(
        at=1_000.0 + n,
        source=Source.EXECUTED,
        invocation=invocation,
        tool="bazel 7.1.0",
        target=f"//pkg:t{n}",
        exit_code=0,
        submitted_at=999.0 + n,
        stamps={"queued": 999.0 + n, "worker_start": 999.5 + n, "worker_completed": 1_000.0 + n},
    )


class _Builder:
    """A ``RecordBuilder`` that counts its calls."""

    def __init__(self, record: ActionRecord) -> None:
        self.record = record
        self.calls = 0

    def __call__(self) -> ActionRecord:
        self.calls += 1
        return self.record


def test_builders_run_once_when_read_or_flushed_never_when_queued(tmp_path: Path) -> None:
    recorder = HistoryRecorder(tmp_path, max_bytes=1 << 20)
    builders = [_Builder(_executed(n)) for n in range(3)]
    for builder in builders:
        recorder.record_later(builder)
    assert [b.calls for b in builders] == [0, 0, 0]  # queuing builds nothing
    (line,) = recorder.build_lines()  # a reader sees every ended action at once
    assert (line.invocation, line.executed) == ("inv", 3)
    queued = next(h for h in recorder.phase_histograms() if h.phase is Phase.QUEUED)
    assert queued.count == 3
    recorder.flush()
    recorder.close()
    assert [b.calls for b in builders] == [1, 1, 1]  # built once, read twice, written once
    written = [r for r in read_history(tmp_path) if isinstance(r, ActionRecord)]
    assert [r.target for r in written] == ["//pkg:t0", "//pkg:t1", "//pkg:t2"]
    assert recorder.recorded == 3 and recorder.dropped == 0


def test_a_lookup_hit_and_a_scheduler_record_keep_their_order(tmp_path: Path) -> None:
    recorder = HistoryRecorder(tmp_path, max_bytes=1 << 20)
    recorder.record_later(_Builder(_executed(0)))
    recorder.record(_executed(1))  # the gRPC thread's kind: a finished record
    recorder.record_later(_Builder(_executed(2)))
    recorder.close()
    written = [r.target for r in read_history(tmp_path) if isinstance(r, ActionRecord)]
    assert written == ["//pkg:t0", "//pkg:t1", "//pkg:t2"]


def test_a_builder_that_raises_is_logged_and_dropped_the_rest_are_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> ActionRecord:
        raise RuntimeError("a bug in the tap")

    recorder = HistoryRecorder(tmp_path, max_bytes=1 << 20)
    recorder.record_later(_Builder(_executed(0)))
    recorder.record_later(broken)
    recorder.record_later(_Builder(_executed(1)))
    with caplog.at_level(logging.ERROR, logger="lre.app._history"):
        recorder.close()
    assert any("building a history record failed" in r.getMessage() for r in caplog.records)
    written = [r.target for r in read_history(tmp_path) if isinstance(r, ActionRecord)]
    assert written == ["//pkg:t0", "//pkg:t1"]
    assert (recorder.recorded, recorder.dropped) == (2, 1)


class _SmallRecorder(HistoryRecorder):
    MAX_PENDING = 4
    MAX_BUFFERED = 6


def test_with_no_flush_the_queue_and_the_unwritten_lines_stay_bounded(tmp_path: Path) -> None:
    """A flush stuck on a dead disk: producers absorb the queue themselves
    (the builders hold operations' results) and the oldest unwritten
    records are dropped and counted."""
    recorder = _SmallRecorder(tmp_path, max_bytes=1 << 20)
    builders = [_Builder(_executed(n)) for n in range(20)]
    for builder in builders:
        recorder.record_later(builder)
        assert len(recorder._pending) <= recorder.MAX_PENDING
    assert sum(b.calls for b in builders) >= 20 - recorder.MAX_PENDING
    (line,) = recorder.build_lines()
    assert line.executed == 20  # every action counted, though not every line is kept
    recorder.close()
    written = [r.target for r in read_history(tmp_path) if isinstance(r, ActionRecord)]
    assert written == [f"//pkg:t{n}" for n in range(14, 20)]  # the newest MAX_BUFFERED
    assert (recorder.recorded, recorder.dropped) == (20, 14)


async def test_the_host_is_sampled_off_the_trio_thread_with_reservations_read_on_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The schedulers live on the Trio thread, so their reservations are read
    there; psutil's parsing of /proc and the flush run in a worker thread."""
    trio_thread = threading.current_thread()
    read_on: list[threading.Thread] = []

    def reserved() -> tuple[int, int, int]:
        read_on.append(threading.current_thread())
        return 1500, 3 << 30, 2

    def samples() -> list[HostSample]:
        return [r for r in read_history(tmp_path) if isinstance(r, HostSample)]

    recorder = HistoryRecorder(tmp_path, max_bytes=1 << 20, reserved=reserved)
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        # virtual time: the clock jumps while a flush runs in its thread, so
        # wait for the lines rather than for a number of seconds
        with trio.fail_after(3_600):
            while True:
                if len(samples()) >= 3:
                    break
                await trio.sleep(recorder.FLUSH_INTERVAL_S)
        nursery.cancel_scope.cancel()
    assert read_on and all(thread is trio_thread for thread in read_on)
    assert recorder.host is not None and recorder.host.memory_total_bytes > 0
    assert {(s.reserved_millicpus, s.reserved_memory_bytes, s.running) for s in samples()} == {
        (1500, 3 << 30, 2)
    }
