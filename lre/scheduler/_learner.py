"""Learned reservations: what past runs of the same kind of action needed.

Each finished run is recorded as one sample (peak RSS, average CPU, ladder step
reached, time) under its *kind key* (:func:`kind_key`). A lookup takes the
configured percentile (default p95, nearest rank) of the samples younger than
the window (default 7 days) and multiplies by the factor (default 1.2).

Persistence: SQLite (stdlib ``sqlite3``) in lre's state directory, so the
knowledge survives restarts. SQLite calls block, so they are kept off the hot
path: :meth:`ReservationLearner.lookup`, :meth:`~ReservationLearner.estimate`
and :meth:`~ReservationLearner.record` only touch an in-memory cache (the last
``max_samples_per_key`` samples of every key, loaded at open); recorded samples
are queued and written in batches by :meth:`~ReservationLearner.flush`, which
:meth:`~ReservationLearner.run` calls every few seconds in a worker thread
(``trio.to_thread``), and :meth:`~ReservationLearner.close` calls once more.
Samples recorded after the last flush are lost if lre is killed.

The database's ``user_version`` says which memory figures its samples hold.
Version 1: the action's own processes only (``_model.MEMORY_*``). A database
of an older lre (version 0) holds figures that could be lre's own image (a
short action's ``ru_maxrss`` carried lre's resident set): at open its
samples are dropped, not corrected (a figure of lre's size cannot be told
from an action's), and each kind is learned again from its next runs.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import trio

from lre.config import LearnerSpec
from lre.scheduler._kind_rule import KindKey, kind_key

__all__ = [
    "LEARNER_DB_NAME",
    "KindKey",
    "ReservationEstimate",
    "ReservationLearner",
    "kind_key",
    "percentile",
]

log = logging.getLogger(__name__)

#: File name of the database inside lre's state directory.
LEARNER_DB_NAME = "learned-reservations.sqlite3"

#: ``PRAGMA user_version`` of a database whose memory figures are the
#: actions' own (see the module docstring); older samples are dropped.
SAMPLES_VERSION = 1

# ---------------------------------------------------------------------- estimates


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100) of a non-empty sequence.

    Raises ``ValueError`` for an empty sequence or ``p`` outside 0..100.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within 0..100, got {p}")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True, slots=True)
class ReservationEstimate:
    """What to reserve for the next run of a kind.

    ``source`` is ``"learned"`` (from ``samples`` past runs) or ``"cold"`` (kind
    never seen, or learning disabled). ``ladder_step`` is where the memory
    ladder starts (0 = this estimate's ``memory_bytes``).
    """

    millicpus: int
    memory_bytes: int
    ladder_step: int
    source: Literal["learned", "cold"]
    samples: int = 0


@dataclass(frozen=True, slots=True)
class LearnerStatistics:
    keys: int
    samples: int
    pending_writes: int
    flushes: int


class _KindSamples:
    __slots__ = ("aggregate", "samples")

    def __init__(self, max_samples: int) -> None:
        # (recorded_at, peak_rss_bytes, average_millicpus, ladder_step), oldest first
        self.samples: deque[tuple[float, int, int, int]] = deque(maxlen=max_samples)
        self.aggregate: tuple[int, int, int] | None = None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    key TEXT NOT NULL,
    recorded_at REAL NOT NULL,
    peak_rss_bytes INTEGER NOT NULL,
    average_millicpus INTEGER NOT NULL,
    ladder_step INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS samples_by_key ON samples (key, recorded_at);
CREATE INDEX IF NOT EXISTS samples_by_time ON samples (recorded_at);
"""


#: A learned p95 CPU up to this multiple of the ask counts as "used what it asked".
CPU_NOISE = 1.1


class ReservationLearner:
    """Per-kind p95 reservations persisted in SQLite (see the module docstring).

    ``path`` is the database file (``":memory:"`` keeps nothing across runs);
    :meth:`in_state_dir` places it in lre's state directory. Opening prunes
    samples older than the window and loads the rest. A database that SQLite
    cannot read is moved aside (``<name>.corrupt-<time>``) with a warning and a
    fresh one is started; any other ``OSError``/``sqlite3.Error`` at open is
    raised. Errors during a flush are logged and the samples stay queued for
    the next flush.
    """

    def __init__(
        self,
        path: str,
        spec: LearnerSpec | None = None,
        *,
        cold_memory_bytes: int = 512 << 20,
        max_samples_per_key: int = 200,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.spec = spec or LearnerSpec()
        if not 0 < self.spec.percentile <= 100:
            raise ValueError(
                f"learner.percentile must be within (0, 100], got {self.spec.percentile}"
            )
        if self.spec.factor <= 0:
            raise ValueError(f"learner.factor must be > 0, got {self.spec.factor}")
        self.path = path
        self.cold_memory_bytes = cold_memory_bytes
        self._max_samples = max_samples_per_key
        self._clock = clock
        self._kinds: dict[str, _KindSamples] = {}
        self._pending: list[tuple[str, float, int, int, int]] = []
        self._lock = threading.Lock()  # guards the connection and _pending
        self._flushes = 0
        self._db = self._open()
        self._load()

    @classmethod
    def in_state_dir(
        cls, state_dir: str, spec: LearnerSpec | None = None, **kwargs: object
    ) -> ReservationLearner:
        """Open (creating the directory if needed) ``<state_dir>/learned-reservations.sqlite3``."""
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        return cls(os.path.join(state_dir, LEARNER_DB_NAME), spec, **kwargs)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ hot path

    def lookup(self, key: str) -> tuple[int, int, int] | None:
        """``(millicpus, memory_bytes, ladder_step)`` learned for ``key``, already
        scaled (percentile x factor), or None for a kind with no sample in the
        window. A :class:`KindKey` with no sample of its own reads its
        fallbacks in order. Memory only; never blocks. (The scheduler's
        ``ReservationAdvisor``.)"""
        found = self._learned_key(key)
        return None if found is None else self._aggregate(found)

    def _learned_key(self, key: str) -> str | None:
        """The first of ``key`` and its fallbacks with a sample in the window."""
        if not self.spec.enabled:
            return None
        for candidate in (key, *getattr(key, "fallbacks", ())):
            kind = self._kinds.get(candidate)
            if kind is None:
                continue
            horizon = self._clock() - self.spec.window
            while kind.samples and kind.samples[0][0] < horizon:
                kind.samples.popleft()
                kind.aggregate = None
            if kind.samples:
                return str(candidate)
            del self._kinds[candidate]
        return None

    def _aggregate(self, key: str) -> tuple[int, int, int]:
        kind = self._kinds[key]
        if kind.aggregate is None:
            p = self.spec.percentile
            factor = self.spec.factor
            rss = percentile([s[1] for s in kind.samples], p)
            cpu = percentile([s[2] for s in kind.samples], p)
            # the latest run's step: one run that fits brings the kind down
            step = kind.samples[-1][3]
            memory = max(math.ceil(rss * factor), int(self.spec.min_memory))
            kind.aggregate = (math.ceil(cpu * factor), memory, int(step))
        return kind.aggregate

    def estimate(
        self, key: str, asked_millicpus: int, asked_memory_bytes: int
    ) -> ReservationEstimate:
        """The reservation for the next run: learned values, never below what the
        client asked; a kind never seen gets ``max(asked memory, cold memory)``
        and the CPUs it asked for."""
        found = self._learned_key(key)
        if found is None:
            return ReservationEstimate(
                millicpus=asked_millicpus,
                memory_bytes=max(asked_memory_bytes, self.cold_memory_bytes),
                ladder_step=0,
                source="cold",
            )
        cpu, memory, step = self._aggregate(found)
        if cpu <= asked_millicpus * self.spec.factor * CPU_NOISE:
            # Used about what it asked (within measurement noise): reserve the ask.
            # Adding the factor here would make a one-CPU compile reserve 1.2-1.3
            # CPUs, and on a 2-core worker a 1.05 p95 would then admit one action
            # at a time (seen as idle cores in bench/bench_firehose.py).
            cpu = asked_millicpus
        return ReservationEstimate(
            millicpus=max(asked_millicpus, cpu),
            memory_bytes=max(asked_memory_bytes, memory),
            ladder_step=step,
            source="learned",
            samples=len(self._kinds[found].samples),
        )

    def record(
        self, key: str, peak_rss_bytes: int, average_millicpus: int, ladder_step: int
    ) -> None:
        """Remember one finished run (memory now, SQLite at the next flush).

        ``ladder_step`` is the step the run finished at, so the next run of the
        kind starts there. A :class:`KindKey` is recorded under its ``shared``
        keys too. Negative values raise ``ValueError``.
        """
        if not self.spec.enabled:
            return
        if peak_rss_bytes < 0 or average_millicpus < 0 or ladder_step < 0:
            raise ValueError(
                f"learner sample for {key!r} must be >= 0: peak_rss_bytes={peak_rss_bytes}, "
                f"average_millicpus={average_millicpus}, ladder_step={ladder_step}"
            )
        now = self._clock()
        for each in (str(key), *getattr(key, "shared", ())):
            kind = self._kinds.get(each)
            if kind is None:
                kind = self._kinds[each] = _KindSamples(self._max_samples)
            kind.samples.append((now, peak_rss_bytes, average_millicpus, ladder_step))
            kind.aggregate = None
            with self._lock:
                self._pending.append((each, now, peak_rss_bytes, average_millicpus, ladder_step))

    def statistics(self) -> LearnerStatistics:
        return LearnerStatistics(
            keys=len(self._kinds),
            samples=sum(len(k.samples) for k in self._kinds.values()),
            pending_writes=len(self._pending),
            flushes=self._flushes,
        )

    # ------------------------------------------------------------------ persistence

    def flush(self) -> int:
        """Write queued samples and prune old ones (blocking; call from a thread).

        Returns the number of samples written. On ``sqlite3.Error`` the samples
        are put back in the queue and the error is logged, not raised.
        """
        with self._lock:
            if not self._pending or self._db is None:
                return 0
            batch, self._pending = self._pending, []
            try:
                with self._db:
                    self._db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?)", batch)
                    self._db.execute(
                        "DELETE FROM samples WHERE recorded_at < ?",
                        (self._clock() - self.spec.window,),
                    )
                    for key in {row[0] for row in batch}:
                        self._db.execute(
                            "DELETE FROM samples WHERE rowid IN (SELECT rowid FROM samples "
                            "WHERE key = ? ORDER BY recorded_at DESC LIMIT -1 OFFSET ?)",
                            (key, self._max_samples),
                        )
            except sqlite3.Error:
                log.exception("learner: writing %d sample(s) to %s failed", len(batch), self.path)
                self._pending = batch + self._pending
                return 0
            self._flushes += 1
            return len(batch)

    async def run(
        self,
        flush_interval: float = 5.0,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Flush queued samples every ``flush_interval`` seconds in a worker thread
        until cancelled (the final flush is :meth:`close`'s job)."""
        task_status.started()
        while True:
            await trio.sleep(flush_interval)
            if self._pending:
                await trio.to_thread.run_sync(self.flush)

    def close(self) -> None:
        """Flush and close the database (blocking). Idempotent."""
        if self._db is None:
            return
        self.flush()
        with self._lock:
            self._db.close()
            self._db = None

    def __enter__(self) -> ReservationLearner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _connect(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            _create_private(self.path)
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level="DEFERRED")
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            db.execute("SELECT count(*) FROM samples").fetchone()
            _drop_untrusted(db, self.path)
        except BaseException:
            db.close()
            raise
        return db

    def _open(self) -> sqlite3.Connection | None:
        try:
            return self._connect()
        except sqlite3.DatabaseError as exc:
            if self.path == ":memory:" or not os.path.exists(self.path):
                raise
            aside = f"{self.path}.corrupt-{int(time.time())}"
            log.warning("learner: %s is unreadable (%s); moved to %s", self.path, exc, aside)
            os.replace(self.path, aside)
            for suffix in ("-wal", "-shm"):
                try:
                    os.unlink(self.path + suffix)
                except FileNotFoundError:
                    pass
            return self._connect()

    def _load(self) -> None:
        assert self._db is not None
        horizon = self._clock() - self.spec.window
        with self._lock, self._db:
            self._db.execute("DELETE FROM samples WHERE recorded_at < ?", (horizon,))
            rows = self._db.execute(
                "SELECT key, recorded_at, peak_rss_bytes, average_millicpus, ladder_step "
                "FROM samples ORDER BY key, recorded_at"
            )
            for key, at, rss, cpu, step in rows:
                kind = self._kinds.get(key)
                if kind is None:
                    kind = self._kinds[key] = _KindSamples(self._max_samples)
                kind.samples.append((at, rss, cpu, step))


def _drop_untrusted(db: sqlite3.Connection, path: str) -> None:
    """Drop the samples of a database older than ``SAMPLES_VERSION`` and mark
    it current (logged when there were any). ``sqlite3.Error`` propagates."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version >= SAMPLES_VERSION:
        return
    with db:
        dropped = db.execute("DELETE FROM samples").rowcount
        db.execute(f"PRAGMA user_version = {SAMPLES_VERSION}")
    if dropped > 0:
        log.warning(
            "learner: dropped %d samples of %s recorded by an older lre (their memory "
            "figures could be lre's own); each kind of action is learned again",
            dropped,
            path,
        )


#: Mode of the database file; SQLite gives its -wal and -shm files the same.
DB_FILE_MODE = 0o600


def _create_private(path: str) -> None:
    """Create ``path`` empty and owner-only if missing, or narrow an existing
    file's mode to ``DB_FILE_MODE`` (an older lre made it 0644). The kinds
    and commands it names are the user's business. ``OSError`` propagates."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, DB_FILE_MODE)
    try:
        if os.fstat(fd).st_mode & 0o777 & ~DB_FILE_MODE:
            os.fchmod(fd, DB_FILE_MODE)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm"):
        try:
            os.chmod(path + suffix, DB_FILE_MODE)
        except FileNotFoundError:
            pass
