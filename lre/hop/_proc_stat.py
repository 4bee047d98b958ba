"""``/proc/<pid>/stat``: the one reading of a process's kernel status line
that the worker (sampler, orphan sweep) and the service (peer lookup
without ``children`` files) share. The guardian keeps its own few lines:
it runs as a file on its own and imports nothing of lre.

The command name in parentheses may hold spaces and parentheses, so the
fields are counted from the last ``)``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Fields after the command name that ``parse_proc_stat`` needs (up to rss).
_FIELDS = 22


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
    """The fields of one ``/proc/<pid>/stat`` text.

    Raises ``ValueError`` when ``data`` is not such a line (no ``)`` or
    fewer fields than rss).
    """
    close = data.rfind(b")")
    fields = data[close + 2 :].split(None, _FIELDS)
    if close < 0 or len(fields) < _FIELDS:
        raise ValueError(f"not a /proc/<pid>/stat line: {data[:80]!r}")
    return ProcStat(
        state=fields[0].decode(),
        parent=int(fields[1]),
        group=int(fields[2]),
        session=int(fields[3]),
        cpu_ticks=int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14]),
        start_ticks=int(fields[19]),
        rss_pages=int(fields[21]),
    )


def read_proc_stat(pid: int | str) -> ProcStat:
    """``parse_proc_stat`` of ``/proc/<pid>/stat``.

    Raises ``OSError`` when the file cannot be read (the process is gone,
    hidden, or no descriptor is left) and ``ValueError`` as
    ``parse_proc_stat`` does.
    """
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return parse_proc_stat(handle.read())
