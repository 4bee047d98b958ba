"""``/proc/<pid>/stat``: the one reading of a process's kernel status line
that the worker (sampler, orphan sweep) and the service (peer lookup
without ``children`` files) share. The guardian keeps its own few lines:
it runs as a file on its own and imports nothing of lre.

The command name in parentheses may hold spaces and parentheses, so the
fields are counted from the last ``)``. ``proc_stat_fields`` splits a line
and leaves the numbers as bytes, for the sampler, which passes over every
process of the host and drops most after two fields; ``ProcStat`` is the
same line with its figures converted, for everyone else.
"""

from __future__ import annotations

from dataclasses import dataclass


class StatField:
    """Indexes into ``proc_stat_fields``, counted after the command name
    (proc(5) numbers them from 1 with the pid and the name first)."""

    STATE = 0
    PARENT = 1
    GROUP = 2
    SESSION = 3
    USER_TICKS = 11
    SYSTEM_TICKS = 12
    CHILDREN_USER_TICKS = 13
    CHILDREN_SYSTEM_TICKS = 14
    START_TICKS = 19
    RSS_PAGES = 21


#: Fields after the command name that a line must have (up to rss).
_FIELDS = StatField.RSS_PAGES + 1


def proc_stat_fields(data: bytes) -> list[bytes]:
    """The fields of one ``/proc/<pid>/stat`` text after the command name,
    unconverted (index them with ``StatField``).

    Raises ``ValueError`` when ``data`` is not such a line (no ``)`` or
    fewer fields than rss).
    """
    close = data.rfind(b")")
    fields = data[close + 2 :].split(None, _FIELDS)
    if close < 0 or len(fields) < _FIELDS:
        raise ValueError(f"not a /proc/<pid>/stat line: {data[:80]!r}")
    return fields


@dataclass(frozen=True, slots=True)
class ProcStat:
    """What lre reads of one process; ticks are clock ticks, rss in pages."""

    state: str
    parent: int
    group: int
    session: int
    #: user + system time of the process and of its waited-for children
    cpu_ticks: int
    #: start time in clock ticks since boot
    start_ticks: int
    rss_pages: int


def parse_proc_stat(data: bytes) -> ProcStat:
    """``ProcStat`` of one ``/proc/<pid>/stat`` text; ``ValueError`` as
    ``proc_stat_fields`` raises it, or for a figure that is no number."""
    f = proc_stat_fields(data)
    return ProcStat(
        state=f[StatField.STATE].decode(),
        parent=int(f[StatField.PARENT]),
        group=int(f[StatField.GROUP]),
        session=int(f[StatField.SESSION]),
        cpu_ticks=int(f[StatField.USER_TICKS])
        + int(f[StatField.SYSTEM_TICKS])
        + int(f[StatField.CHILDREN_USER_TICKS])
        + int(f[StatField.CHILDREN_SYSTEM_TICKS]),
        start_ticks=int(f[StatField.START_TICKS]),
        rss_pages=int(f[StatField.RSS_PAGES]),
    )


def read_proc_stat(pid: int | str) -> ProcStat:
    """``parse_proc_stat`` of ``/proc/<pid>/stat``.

    Raises ``OSError`` when the file cannot be read (the process is gone,
    hidden, or no descriptor is left) and ``ValueError`` as
    ``parse_proc_stat`` does.
    """
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return parse_proc_stat(handle.read())
