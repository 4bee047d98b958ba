"""The kernel's memory figure of an action's command tree, as reported by
the action's first process.

lre's own ``wait4`` of an action's first process carries lre's image
(``_own_image.py``): that process was forked from lre and the kernel keeps
the pre-``exec`` image in its ``ru_maxrss``. Its children do not carry it:
they are forked from a program that has already executed. Under ``pidns``
and ``userns`` the first process of the action's namespace (pid 1) already
forks the command and waits for it; where that pid 1 is GNU ``time``
(``time -q -f %M -o /proc/self/fd/N -- command``), it writes the ``ru_maxrss`` of
the command it waited for (the largest single process of the command's
reaped tree, each counted from its ``exec`` on) to descriptor ``N``: an
anonymous memory file (``memfd``) lre made for the run and reads once the
run is reaped. GNU ``time`` is used only when a probe at start-up shows it
writes that figure (``peak_tool``); otherwise pid 1 stays coreutils
``timeout -- 0`` and the kernel's figure is lre's own ``wait4`` compared
with lre's image, as before (``lre doctor`` names the missing tool).

What the figure leaves out: a process the command's tree did not wait for
(an orphan reparented to pid 1) is reaped by ``time`` but not reported.

The action can write to the file (the command inherits the descriptor and
``time``'s own open of it). So the report is parsed defensively
(``read_report``): it counts only when the whole file is one line of
decimal digits, nonzero, at most ``MAX_REPORT_BYTES`` long and no larger
than the machine's RAM; anything else (garbage, an empty file, the action's
text before ``time``'s line) is no figure, never an error. A figure the
action forged can never lower what lre records below what the sampler saw
(``_memory_figure`` takes the larger); it can raise its own figure (up to
the machine's RAM, as an action that really allocated it could).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading

__all__ = [
    "MAX_REPORT_BYTES",
    "open_report",
    "parse_report",
    "peak_tool",
    "peak_tool_missing",
    "read_report",
    "report_argv",
]

log = logging.getLogger(__name__)

#: The tool looked up on PATH (GNU time, Debian package ``time``).
TOOL = "time"

#: The longest report taken: 12 digits of KiB and a newline.
MAX_REPORT_BYTES = 13

_REPORT = re.compile(rb"([0-9]{1,12})\n")

_lock = threading.Lock()
#: (path or None, why it is not used) once probed
_probed: list[tuple[str | None, str | None]] = []


def report_argv(tool: str, fd: int) -> list[str]:
    """The pid-1 prefix that runs a command and writes its tree's peak (KiB)
    to descriptor ``fd``; the command's argv follows. The path is /proc's,
    not /dev/fd: every action's namespace has its /proc by then."""
    return [tool, "-q", "-f", "%M", "-o", f"/proc/self/fd/{fd}", "--"]


def open_report() -> int:
    """A new anonymous file for one run's report (close-on-exec: handed to
    the first process through ``pass_fds`` only). Raises ``OSError`` when
    the kernel refuses one (too many open files)."""
    return os.memfd_create("lre-tree-peak", os.MFD_CLOEXEC)


def _physical_memory() -> int:
    """This machine's RAM in bytes (no resident set is larger)."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


_RAM = _physical_memory()


def parse_report(data: bytes) -> int:
    """Bytes from a report's contents (``time``'s ``%M``: KiB and a
    newline), or 0 when it is not exactly one such line, says 0, or says
    more than this machine's RAM (the action's text before ``time``'s
    digits, without a line end, would make one long number)."""
    if len(data) > MAX_REPORT_BYTES:
        return 0
    match = _REPORT.fullmatch(data)
    if match is None:
        return 0
    figure = int(match.group(1)) * 1024
    return figure if figure <= _RAM else 0


def read_report(fd: int) -> int:
    """The figure in report ``fd`` (bytes; 0: none, see ``parse_report``).
    Never raises: a file that cannot be read is no figure."""
    try:
        size = os.fstat(fd).st_size
        if size > MAX_REPORT_BYTES:
            return 0
        return parse_report(os.pread(fd, MAX_REPORT_BYTES + 1, 0))
    except OSError as error:
        log.debug("cannot read an action's tree peak report: %s", error)
        return 0


def _probe(tool: str) -> str | None:
    """Why ``tool`` cannot report a tree's peak (None: it can)."""
    try:
        fd = open_report()
    except OSError as error:
        return f"cannot make a report file ({error})"
    try:
        done = subprocess.run(
            [*report_argv(tool, fd), "sh", "-c", ":"],
            pass_fds=(fd,),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            check=False,
        )
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip()
            return f"{tool} -f %M -o failed: {said or f'exit {done.returncode}'}"
        if not read_report(fd):
            return f"{tool} wrote no %M figure (not GNU time?)"
        return None
    except (OSError, subprocess.SubprocessError) as error:
        return f"cannot run {tool}: {error}"
    finally:
        os.close(fd)


def _lookup() -> tuple[str | None, str | None]:
    with _lock:
        if not _probed:
            path = shutil.which(TOOL)
            if path is None:
                _probed.append((None, f"GNU {TOOL} is not on PATH"))
            else:
                why = _probe(path)
                _probed.append((None, why) if why is not None else (path, None))
            if _probed[0][1] is not None:
                log.warning(
                    "short actions get no memory figure of their own (%s): their figure "
                    "is lre's own wait4, used only above lre's image",
                    _probed[0][1],
                )
        return _probed[0]


def peak_tool() -> str | None:
    """The path of GNU time when it reports a tree's peak here (probed
    once per process), else None (logged once)."""
    return _lookup()[0]


def peak_tool_missing() -> str | None:
    """Why no tool reports a tree's peak here (None: ``peak_tool`` does)."""
    return _lookup()[1]
