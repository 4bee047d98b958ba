"""ReservationLearner (SQLite, restarts, window, percentile) and kind_key."""

from __future__ import annotations

import math
import os
import sqlite3
import stat
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from lre.config import ByteSize, LearnerSpec
from lre.scheduler._learner import (
    LEARNER_DB_NAME,
    ReservationLearner,
    kind_key,
    percentile,
)

MiB = 1 << 20
DAY = 86400.0


class FakeClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------- kind keys


def test_bazel_metadata_wins() -> None:
    assert kind_key("CppCompile", "//a:b", ["gcc", "-c", "x.c"]) == "bazel:CppCompile://a:b"
    assert kind_key("", "//a:b", []) == "bazel:://a:b"


def test_file_names_and_counts_do_not_change_the_kind() -> None:
    one = kind_key("", "", ["/usr/bin/gcc", "-O2", "-Iinc/a", "-c", "src/a.c", "-o", "out/a.o"])
    other = kind_key(
        "",
        "",
        ["gcc", "-O2", "-Iinc/b", "-Iinc/c", "-c", "lib/zz.c", "-o", "bazel-out/zz.o"],
    )
    assert one == other
    assert one.startswith("cmd:gcc:")


def test_flags_extensions_and_programs_do_change_the_kind() -> None:
    base = ["gcc", "-O2", "-c", "a.c"]
    assert kind_key("", "", base) != kind_key("", "", ["gcc", "-O0", "-c", "a.c"])
    assert kind_key("", "", base) != kind_key("", "", ["gcc", "-O2", "-c", "a.rs"])
    assert kind_key("", "", base) != kind_key("", "", ["clang", "-O2", "-c", "a.c"])


def test_numbers_hashes_and_values_are_abstracted() -> None:
    a = kind_key("", "", ["tool", "--jobs=4", "--seed", "17", "--id", "ab" * 20])
    b = kind_key("", "", ["tool", "--jobs=16", "--seed", "99", "--id", "cd" * 20])
    assert a == b


def test_text_with_any_whitespace_is_abstracted() -> None:
    # Tabs, newlines and Unicode spaces count as spaces, like str.isspace().
    texts = ["two words", "tab\there", "line\nbreak", "no\u00a0break", "ideo\u3000space"]
    keys = {kind_key("", "", ["tool", "--message", text]) for text in texts}
    assert len(keys) == 1
    assert kind_key("", "", ["tool", "--message", "oneword"]) not in keys


def test_interpreters_are_keyed_by_script() -> None:
    gen = kind_key("", "", ["python3", "tools/gen.py", "out/x.h"])
    other = kind_key("", "", ["python3", "tools/other.py", "out/x.h"])
    assert gen != other
    assert gen.startswith("cmd:python3+gen.py:")
    assert kind_key("", "", ["/bin/bash", "-c", "gcc -c a.c"]).startswith("cmd:bash+gcc:")
    assert kind_key("", "", ["env", "A=1", "rustc", "x.rs"]).startswith("cmd:env+rustc:")


@given(st.lists(st.text(max_size=30), max_size=8))
def test_kind_key_is_total_and_stable(args: list[str]) -> None:
    assert kind_key("", "", args) == kind_key("", "", list(args))


# ---------------------------------------------------------------- percentile


def test_percentile_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 95) == 95
    assert percentile(values, 100) == 100
    assert percentile([7], 95) == 7
    assert percentile([1, 2, 3, 4, 5], 95) == 5
    with pytest.raises(ValueError, match="no values"):
        percentile([], 95)
    with pytest.raises(ValueError, match="percentile"):
        percentile([1], 101)


# ---------------------------------------------------------------- learner


def test_cold_then_learned(tmp_path: Path) -> None:
    clock = FakeClock()
    with ReservationLearner.in_state_dir(
        str(tmp_path / "state"), cold_memory_bytes=256 * MiB, clock=clock
    ) as learner:
        cold = learner.estimate("k", asked_millicpus=1000, asked_memory_bytes=0)
        assert (cold.source, cold.millicpus, cold.memory_bytes, cold.ladder_step) == (
            "cold",
            1000,
            256 * MiB,
            0,
        )
        # a client asking for more than the cold default gets what it asked
        assert learner.estimate("k", 1000, 600 * MiB).memory_bytes == 600 * MiB
        assert learner.lookup("k") is None
        for i in range(1, 21):  # 20 samples: p95 (nearest rank) is the 19th
            learner.record(
                "k", peak_rss_bytes=i * 10 * MiB, average_millicpus=i * 100, ladder_step=0
            )
        est = learner.estimate("k", asked_millicpus=1000, asked_memory_bytes=0)
        assert est.source == "learned" and est.samples == 20
        assert est.memory_bytes == pytest.approx(190 * MiB * 1.2, abs=1)
        assert est.millicpus == 2280  # 1900 x 1.2
        # never below what the client asked
        assert learner.estimate("k", 4000, 1 << 30).millicpus == 4000
        assert learner.estimate("k", 4000, 1 << 30).memory_bytes == 1 << 30
        assert learner.lookup("k") == (2280, est.memory_bytes, 0)


def test_a_kind_using_about_what_it_asked_reserves_the_ask(tmp_path: Path) -> None:
    # A one-CPU compile measured at 1.0-1.08 CPUs must not reserve 1.2-1.3: on a
    # 2-core worker with capacity 2.5 that would run one action at a time.
    with ReservationLearner.in_state_dir(str(tmp_path / "state"), clock=FakeClock()) as learner:
        for average in (950, 1000, 1020, 1050, 1080):
            learner.record("c", peak_rss_bytes=MiB, average_millicpus=average, ladder_step=0)
        assert learner.estimate("c", 1000, 0).millicpus == 1000
        # clearly above the ask (p95 1.5 CPUs): the factor applies
        for _ in range(10):
            learner.record("c", peak_rss_bytes=MiB, average_millicpus=1500, ladder_step=0)
        assert learner.estimate("c", 1000, 0).millicpus == 1800


def test_survives_restart_and_forgets_outside_window(tmp_path: Path) -> None:
    clock = FakeClock()
    path = str(tmp_path / LEARNER_DB_NAME)
    spec = LearnerSpec(window=7 * DAY)
    learner = ReservationLearner(path, spec, clock=clock)
    learner.record("old", 100 * MiB, 500, 0)
    clock.now += 6 * DAY
    learner.record("new", 300 * MiB, 1500, 2)
    learner.close()
    learner.close()  # idempotent

    clock.now += 2 * DAY  # "old" is now 8 days old
    again = ReservationLearner(path, spec, clock=clock)
    try:
        assert again.lookup("old") is None
        assert again.lookup("new") == (1800, math.ceil(300 * MiB * 1.2), 2)
        assert again.statistics().keys == 1
    finally:
        again.close()
    rows = sqlite3.connect(path).execute("SELECT key FROM samples").fetchall()
    assert rows == [("new",)]


def _old_database(path: str, now: float) -> None:
    """A database as lre wrote it before memory figures were the actions' own
    (no user_version): an echo recorded at lre's own 72 MiB."""
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE samples (key TEXT NOT NULL, recorded_at REAL NOT NULL, "
        "peak_rss_bytes INTEGER NOT NULL, average_millicpus INTEGER NOT NULL, "
        "ladder_step INTEGER NOT NULL);"
    )
    db.executemany(
        "INSERT INTO samples VALUES (?, ?, ?, ?, ?)",
        [("echo", now - 60 * i, 72 * MiB, 10, 0) for i in range(5)],
    )
    db.commit()
    db.close()


def test_samples_of_an_older_lre_are_not_trusted(tmp_path: Path) -> None:
    clock = FakeClock()
    path = str(tmp_path / LEARNER_DB_NAME)
    _old_database(path, clock.now)
    spec = LearnerSpec(min_memory=ByteSize(16 * MiB))
    with ReservationLearner(path, spec, clock=clock) as learner:
        # dropped, so the kind is cold again rather than reserving 72 MiB x 1.2
        assert learner.lookup("echo") is None
        assert learner.estimate("echo", 1000, 0).source == "cold"
        learner.record("echo", 2 * MiB, 10, 0)  # re-learned from its next run
    with ReservationLearner(path, spec, clock=clock) as again:
        # the samples recorded since are kept across a restart
        assert again.lookup("echo") == (12, 16 * MiB, 0)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (1,)
    assert db.execute("SELECT peak_rss_bytes FROM samples").fetchall() == [(2 * MiB,)]


def test_window_applies_without_restart() -> None:
    clock = FakeClock()
    with ReservationLearner(":memory:", LearnerSpec(window=60), clock=clock) as learner:
        learner.record("k", 1 * MiB, 100, 0)
        assert learner.lookup("k") is not None
        clock.now += 61
        assert learner.lookup("k") is None
        assert learner.estimate("k", 0, 0).source == "cold"


def test_ladder_step_is_learned() -> None:
    with ReservationLearner(":memory:") as learner:
        learner.record("big", 900 * MiB, 1000, 1)
        est = learner.estimate("big", 1000, 0)
        assert est.ladder_step == 1


def test_one_run_that_fits_brings_the_step_back_down() -> None:
    # the step is the latest run's, not a percentile that a kill holds up for 7 days
    with ReservationLearner(":memory:") as learner:
        for _ in range(5):
            learner.record("k", 100 * MiB, 0, 0)
        learner.record("k", 300 * MiB, 0, 1)  # a kill: the next run one step up
        assert learner.estimate("k", 0, 0).ladder_step == 1
        learner.record("k", 120 * MiB, 0, 0)  # that run ended
        assert learner.estimate("k", 0, 0).ladder_step == 0


def test_learned_memory_has_a_floor() -> None:
    with ReservationLearner(":memory:", LearnerSpec(min_memory=ByteSize(64 * MiB))) as learner:
        learner.record("tiny", 2 * MiB, 0, 0)
        assert learner.estimate("tiny", 0, 0).memory_bytes == 64 * MiB
        learner.record("big", 100 * MiB, 0, 0)
        assert learner.estimate("big", 0, 0).memory_bytes == math.ceil(100 * MiB * 1.2)


def test_disabled_learner_is_always_cold() -> None:
    with ReservationLearner(":memory:", LearnerSpec(enabled=False)) as learner:
        learner.record("k", 1 << 30, 4000, 3)
        assert learner.lookup("k") is None
        assert learner.estimate("k", 2000, 0).source == "cold"


def test_record_rejects_negative_values() -> None:
    with ReservationLearner(":memory:") as learner, pytest.raises(ValueError, match="peak_rss"):
        learner.record("k", -1, 0, 0)


def test_samples_per_key_are_capped(tmp_path: Path) -> None:
    path = str(tmp_path / "db.sqlite3")
    clock = FakeClock()
    learner = ReservationLearner(path, max_samples_per_key=5, clock=clock)
    for i in range(12):
        clock.now += 1
        learner.record("k", (i + 100) * MiB, 0, 0)
    assert learner.flush() == 12
    assert learner.flush() == 0
    learner.close()
    count = sqlite3.connect(path).execute("SELECT count(*) FROM samples").fetchone()[0]
    assert count == 5
    with ReservationLearner(path, max_samples_per_key=5, clock=clock) as again:
        learned = again.lookup("k")
        assert learned is not None and learned[1] == math.ceil(111 * MiB * 1.2)


def test_corrupt_database_is_moved_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / LEARNER_DB_NAME
    path.write_bytes(b"this is not a sqlite database" * 100)
    with ReservationLearner(str(path)) as learner:
        learner.record("k", MiB, 0, 0)
    assert any(p.name.startswith(LEARNER_DB_NAME + ".corrupt-") for p in tmp_path.iterdir())
    assert "unreadable" in caplog.text


def test_invalid_spec_is_rejected() -> None:
    with pytest.raises(ValueError, match="percentile"):
        ReservationLearner(":memory:", LearnerSpec(percentile=0))
    with pytest.raises(ValueError, match="factor"):
        ReservationLearner(":memory:", LearnerSpec(factor=0))


async def test_run_flushes_in_a_thread(tmp_path: Path) -> None:
    path = str(tmp_path / "db.sqlite3")
    learner = ReservationLearner(path)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(learner.run, 0.05)
            learner.record("k", MiB, 10, 0)
            await trio.sleep(0.5)  # ten flush intervals
            assert learner.statistics().pending_writes == 0
            nursery.cancel_scope.cancel()
        assert learner.statistics().flushes >= 1
        rows = sqlite3.connect(path).execute("SELECT count(*) FROM samples").fetchone()[0]
        assert rows == 1
    finally:
        learner.close()


def test_database_and_its_wal_are_owner_only(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        with ReservationLearner.in_state_dir(str(tmp_path / "state")) as learner:
            learner.record("k", 100 * MiB, 500, 0)
            learner.flush()
            files = sorted((tmp_path / "state").iterdir())
            assert LEARNER_DB_NAME in [f.name for f in files]
            for file in files:
                assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    finally:
        os.umask(old_umask)


def test_a_world_readable_database_is_narrowed(tmp_path: Path) -> None:
    path = tmp_path / LEARNER_DB_NAME
    ReservationLearner(str(path)).close()
    path.chmod(0o644)
    ReservationLearner(str(path)).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
