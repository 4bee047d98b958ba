"""A watchdog process that kills what actions leave behind when lre dies.

Nothing else ties an action's processes to lre's life (a parent-death signal
would cost an extra exec per action and reach only the first process), so
each containment backend (``_containment.py``) lists its actions here. With
``pidns`` killing a namespace's first process kills the whole namespace; with
``portable`` the guardian kills groups, orphans and their descendants.

- lre starts the guardian once, on the first action, with ``posix_spawn``:
  ``python -I -S`` running this file, in a session of its own (a Ctrl-C in
  lre's terminal does not reach it), stdin the read end of a pipe whose write
  end only lre holds (close-on-exec, so no action inherits it).
- lre writes ``+PGID`` when an action's group starts and ``-PGID`` just before
  it reaps the group's leader (the zombie keeps the id reserved until then, so
  a listed id never names a stranger's group); ``*PID`` / ``/PID`` list and
  unlist single orphans that lre adopted as subreaper and left running.
- When the pipe reaches end of file (lre exited, however it exited) the
  guardian reads the process table once and SIGKILLs every listed group, every
  listed orphan and every descendant of those, then exits. After a clean
  shutdown the lists are empty.

Limits: an orphan re-parented to lre and not yet listed (lre lists the ones
it finds when an action ends) is re-parented to init when lre dies and is not
found; the next lre start kills processes left in its work directory.

The guardian itself uses the standard library only and imports nothing of
lre, so starting it costs one small interpreter. If it cannot be started or
dies, lre logs a warning once and runs on without it (the restart clean-up
in ``_workdir.py`` still applies).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

__all__ = ["ProcessGuardian"]

log = logging.getLogger(__name__)


class ProcessGuardian:
    """lre's side: registers action process groups with the guardian process.

    Thread-safe (spawner threads add, the Trio thread removes); each line is
    one ``write`` of a few bytes, which a pipe delivers whole.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid: int | None = None
        self._gave_up = False

    @property
    def pid(self) -> int | None:
        """The guardian's pid once started (for tests and diagnostics)."""
        return self._pid

    def add(self, pgid: int) -> None:
        """List ``pgid`` as a live action group (starts the guardian if needed)."""
        self._send(b"+%d\n" % pgid)

    def remove(self, pgid: int) -> None:
        """Unlist ``pgid``; call before its leader is reaped."""
        self._send(b"-%d\n" % pgid)

    def add_process(self, pid: int) -> None:
        """List the single process ``pid`` (an orphan lre adopted)."""
        self._send(b"*%d\n" % pid)

    def remove_process(self, pid: int) -> None:
        """Unlist the process ``pid``; call before it is reaped."""
        self._send(b"/%d\n" % pid)

    def _send(self, line: bytes) -> None:
        with self._lock:
            if self._fd is None and not self._gave_up:
                self._start()
            fd = self._fd
            if fd is None:
                return
            try:
                os.write(fd, line)
            except OSError as error:
                log.warning(
                    "process guardian (pid %s) is gone (%s); background children of "
                    "actions may outlive an lre crash until the next start",
                    self._pid,
                    error,
                )
                os.close(fd)
                self._fd = None
                self._gave_up = True

    def _start(self) -> None:
        """(under the lock) spawn the guardian; on failure log and give up."""
        read_end, write_end = os.pipe()  # both close-on-exec
        try:
            self._pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", os.path.abspath(__file__)],
                {},
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, read_end, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_DUP2, 1, 2),
                ],
                setsid=True,
            )
        except OSError as error:
            os.close(write_end)
            log.warning(
                "cannot start the process guardian (%s); background children of "
                "actions may outlive an lre crash until the next start",
                error,
            )
            self._gave_up = True
            return
        finally:
            os.close(read_end)
        self._fd = write_end


def _process_table() -> list[tuple[int, int, int]]:
    """(pid, parent pid, process group) of every process that can be read."""
    table: list[tuple[int, int, int]] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2 :].split()
        table.append((int(name), int(fields[1]), int(fields[2])))
    return table


def doomed(groups: set[int], pids: set[int], table: list[tuple[int, int, int]]) -> set[int]:
    """Members of ``groups``, the ``pids`` themselves, and every descendant of both."""
    children: dict[int, list[int]] = {}
    found: set[int] = set(pids)
    for pid, parent, group in table:
        children.setdefault(parent, []).append(pid)
        if group in groups:
            found.add(pid)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    found.discard(os.getpid())
    return found


def serve(stdin: int = 0) -> None:
    """The guardian's loop (see the module docstring); returns at end of file."""
    for terminal_signal in (signal.SIGINT, signal.SIGHUP):
        signal.signal(terminal_signal, signal.SIG_IGN)
    groups: set[int] = set()
    pids: set[int] = set()
    pending = b""
    while True:
        try:
            chunk = os.read(stdin, 65536)
        except InterruptedError:
            continue
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            try:
                number = int(line[1:])
            except ValueError:
                continue
            kind = line[:1]
            if kind == b"+":
                groups.add(number)
            elif kind == b"-":
                groups.discard(number)
            elif kind == b"*":
                pids.add(number)
            elif kind == b"/":
                pids.discard(number)
    if not (groups or pids):
        return
    try:
        victims = doomed(groups, pids, _process_table()) if os.path.isdir("/proc") else pids
    except OSError:
        victims = set(pids)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    serve()
