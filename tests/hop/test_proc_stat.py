"""``parse_proc_stat`` / ``read_proc_stat``: the fields lre reads of a process."""

from __future__ import annotations

import os

import pytest

from lre.hop import StatField, proc_stat_fields, read_proc_stat
from lre.hop._proc_stat import parse_proc_stat


def _line(comm: bytes) -> bytes:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime stime cutime cstime priority nice threads itrealvalue
    # starttime vsize rss ...
    return (
        b"4242 ("
        + comm
        + b") S 17 4200 4100 0 -1 4194560 10 0 0 0 "
        + b"5 6 7 8 20 0 1 0 123456 987654 321 18446744073709551615 1 1 0\n"
    )


@pytest.mark.parametrize("comm", [b"sh", b"a b", b"x) R 1 2 (y", b"))"])
def test_fields_are_counted_from_the_last_parenthesis(comm: bytes) -> None:
    stat = parse_proc_stat(_line(comm))
    assert (stat.state, stat.parent, stat.group, stat.session) == ("S", 17, 4200, 4100)
    assert stat.cpu_ticks == 5 + 6 + 7 + 8
    assert stat.start_ticks == 123456
    assert stat.rss_pages == 321


@pytest.mark.parametrize("data", [b"", b"4242 (sh) S 1 2 3", b"no parenthesis at all"])
def test_a_short_or_foreign_line_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a /proc/<pid>/stat line"):
        parse_proc_stat(data)


def test_reads_this_process() -> None:
    stat = read_proc_stat(os.getpid())
    assert stat.parent == os.getppid()
    assert stat.group == os.getpgrp()
    assert stat.session == os.getsid(0)
    assert stat.state in ("R", "S")
    assert stat.rss_pages > 0


def test_a_gone_process_raises_oserror() -> None:
    with pytest.raises(OSError):
        read_proc_stat("no-such-pid")


def test_the_unconverted_fields_are_the_same_line() -> None:
    fields = proc_stat_fields(_line(b"a) b"))
    stat = parse_proc_stat(_line(b"a) b"))
    assert fields[StatField.STATE] == b"S"
    assert int(fields[StatField.SESSION]) == stat.session
    assert int(fields[StatField.GROUP]) == stat.group
    assert int(fields[StatField.PARENT]) == stat.parent
    assert int(fields[StatField.START_TICKS]) == stat.start_ticks
    assert int(fields[StatField.RSS_PAGES]) == stat.rss_pages
    with pytest.raises(ValueError, match="not a /proc/<pid>/stat line"):
        proc_stat_fields(b"4242 (sh) S 1 2 3")
