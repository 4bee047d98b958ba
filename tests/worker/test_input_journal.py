"""The linked-inputs journal on a full disk: the record that finds no room is
cut off whole, so no later record is lost to a torn line
(``lre/worker/inputs/_input_journal.py``)."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from lre.digest import Digest
from lre.worker.inputs._input_journal import InputJournal, read_unfinished
from tests.reliability.test_disk_full import fill, small_disk

__all__ = ["small_disk"]  # the fixture, used by name


def linked(n: int) -> dict[tuple[Digest, bool], tuple[str, int]]:
    """Three CAS files of action ``n``."""
    return {(Digest(f"{n + i:064x}", 1000 + i), False): (f"/cas/{n}/{i}", 0) for i in range(3)}


def paths_of(actions: list[int]) -> set[str]:
    return {f"/cas/{n}/{i}" for n in actions for i in range(3)}


@pytest.fixture
def journal(small_disk: Path) -> Iterator[InputJournal]:
    opened = InputJournal(small_disk / "linked-inputs.journal")
    yield opened
    opened.close()


def test_a_full_disk_loses_no_record_of_the_journal(
    small_disk: Path, journal: InputJournal
) -> None:
    tokens = {0: journal.started(linked(0))}  # type: ignore[arg-type]
    ballast = fill(small_disk)
    failure = None
    for n in range(1, 10_000):
        try:
            tokens[n] = journal.started(linked(n))  # type: ignore[arg-type]
        except OSError as error:
            failure = error
            break
    assert failure is not None, "the journal never ran out of room"
    assert failure.errno == errno.ENOSPC
    assert len(tokens) > 1  # the journal's last page had room for some records
    ballast.unlink()
    tokens[-1] = journal.started(linked(-1_000))  # type: ignore[arg-type]
    # Every record accepted before the disk filled, and the one after it emptied.
    wanted = paths_of([n for n in tokens if n >= 0]) | paths_of([-1_000])
    assert {entry.path for entry in read_unfinished(journal.path)} == wanted
    journal.ended(tokens[0])
    assert {entry.path for entry in read_unfinished(journal.path)} == wanted - paths_of([0])
