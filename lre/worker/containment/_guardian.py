"""A watchdog process that kills what actions leave behind when lre dies.

Nothing else ties an action's processes to lre's life (a parent-death signal
would cost an extra exec per action and reach only the first process), so
each containment backend (``_containment.py``) lists its actions here. With
``pidns`` killing a namespace's first process kills the whole namespace; with
``portable`` the guardian kills groups, orphans and their descendants.

- lre starts the guardian once, on the first action, with ``posix_spawn``:
  ``python -I -S`` running this file, in a session of its own (a Ctrl-C in
  lre's terminal does not reach it), stdin one end of a Unix socket pair
  whose other end only lre holds (close-on-exec, so no action inherits it).
- The channel is a socket, not a pipe, because a pipe can be reopened by
  anyone who may read ``/proc/<guardian>/fd/0``: an action of lre's user
  could then write commands (make a clean shutdown kill any process) or hold
  a write end open, so that the guardian never sees lre's death. A socket
  cannot be opened through ``/proc`` (ENXIO, even for root), a socket pair has
  no address to connect to, and the guardian makes itself non-dumpable, so
  a process of the same user can neither ptrace it nor copy its descriptor
  with ``pidfd_getfd``. It checks that the peer of its stdin is lre (its pid
  is the guardian's argument; ``SO_PEERCRED``) and serves nothing otherwise.
  It holds nothing else of lre's: lre closes its inheritable descriptors in
  the spawn, the guardian closes any others, and lre waits for its "ready"
  byte (sent once it is non-dumpable) before the first action starts.
- lre writes ``+PGID`` when an action's group starts and ``-PGID`` just before
  it reaps the group's leader (the zombie keeps the id reserved until then, so
  a listed id never names a stranger's group); ``*PID`` / ``/PID`` list and
  unlist single orphans that lre adopted as subreaper and left running.
  Numbers below 2 (``-1`` is every process of the user, ``0`` the guardian's
  own group, ``1`` init) are ignored.
- An action's first process runs before lre can list it (its pid exists once
  the fork returns), so from just before the fork until it is listed, its
  spawner thread keeps the spawn announced: ``>DEV:INO:TICKS`` names the
  action's new stdout file (device and inode) and when the fork is about to
  happen (clock ticks since boot, as ``/proc/<pid>/stat`` counts a
  process's start); ``<DEV:INO`` ends it once the process is listed or the
  fork failed. A child that ran unlisted because lre was slow to write (a
  descheduled spawner thread on a loaded machine) then still dies with lre.
- When the channel reaches end of file (lre exited, however it exited, or
  ``close`` was called) the guardian SIGKILLs every listed group, every
  listed orphan and every descendant of those, then exits. Under a spawn
  still announced it also kills each process born since the announcement
  that holds that stdout file open (the child, in its own group once it
  made its session, or between fork and exec with lre's copy of the file),
  with its group and descendants. Descendants are found in the process
  table, so all these are SIGSTOPped first and the table read again until
  no new one appears: a child forked after a reading is still the child of
  a stopped, not yet killed (so not re-parented) process, and is found.
  After a clean shutdown the lists are empty. So a guardian lives exactly
  as long as lre's end of the channel, and so no longer than the last
  action lre ran.

Limits: an orphan re-parented to lre and not yet listed (lre lists the ones
it finds when an action ends) is re-parented to init when lre dies and is not
found; the next lre start kills processes left in its work directory. Under
``portable`` an action runs as lre's user in lre's PID namespace and can
SIGKILL the guardian; lre then logs that it is gone at its next command.

The guardian itself uses the standard library only and imports nothing of
lre, so starting it costs one small interpreter. If it cannot be started or
dies, lre logs a warning once and runs on without it (the restart clean-up
in ``_workdir.py`` still applies).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import struct
import sys
import threading
import time

__all__ = ["ProcessGuardian", "parse_command", "parse_spawn"]

log = logging.getLogger(__name__)

_PR_SET_DUMPABLE = 4
_KINDS = (b"+", b"-", b"*", b"/")
#: How many times at most the guardian stops what it found and looks again
#: for processes forked meanwhile before it kills them all.
_STOP_PASSES = 16
#: A spawn announced (``>DEV:INO:TICKS``) and ended (``<DEV:INO``).
_SPAWN_FIELDS = {b">": 3, b"<": 2}
#: What the guardian sends once it is ready, and how long lre waits for it.
_READY = b"!"
_READY_TIMEOUT_S = 30.0


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
        #: What is listed now (mirrors the guardian's lists; see ``listed``).
        self._groups: set[int] = set()
        self._pids: set[int] = set()
        #: per spawner thread: the stdout file of its announced spawn
        self._spawn = threading.local()

    @property
    def pid(self) -> int | None:
        """The guardian's pid once started (for tests and diagnostics)."""
        return self._pid

    def listed(self) -> tuple[int, ...]:
        """Every listed group leader and single process: the first processes of
        the running actions and the orphans lre adopted (whatever an action
        runs is one of them or a descendant of one)."""
        with self._lock:
            return (*self._groups, *self._pids)

    def start(self) -> None:
        """Start the guardian now if it is not running (idempotent; on failure
        it logs and gives up, as ``add`` would). Called by the spawner thread
        before it joins an action's cgroup, so the guardian is never born in
        one (a cgroup of the first action would count it, and its kill at
        that action's end would take the guardian with it)."""
        with self._lock:
            if self._fd is None and not self._gave_up:
                self._start()

    def spawning(self, stdout: int) -> None:
        """Announce that the calling thread is about to fork an action's first
        process whose stdout is the open file ``stdout`` (a new file of that
        action's): if lre dies before the process is listed (``add``), the
        guardian finds it by that file. The thread calls ``spawned`` once
        the process is listed or the fork failed. Raises ``OSError`` when
        ``stdout`` cannot be read (nothing is announced)."""
        info = os.fstat(stdout)
        key = b"%d:%d" % (info.st_dev, info.st_ino)
        self._spawn.key = key
        self._send(b">%s:%d\n" % (key, _boot_ticks()))

    def spawned(self) -> None:
        """End the calling thread's announced spawn, if any (see ``spawning``)."""
        key: bytes | None = getattr(self._spawn, "key", None)
        if key is not None:
            self._spawn.key = None
            self._send(b"<%s\n" % key)

    def add(self, pgid: int) -> None:
        """List ``pgid`` as a live action group (starts the guardian if needed)."""
        with self._lock:
            self._groups.add(pgid)
        self._send(b"+%d\n" % pgid)

    def remove(self, pgid: int) -> None:
        """Unlist ``pgid``; call before its leader is reaped."""
        with self._lock:
            self._groups.discard(pgid)
        self._send(b"-%d\n" % pgid)

    def add_process(self, pid: int) -> None:
        """List the single process ``pid`` (an orphan lre adopted)."""
        with self._lock:
            self._pids.add(pid)
        self._send(b"*%d\n" % pid)

    def remove_process(self, pid: int) -> None:
        """Unlist the process ``pid``; call before it is reaped."""
        with self._lock:
            self._pids.discard(pid)
        self._send(b"/%d\n" % pid)

    def close(self) -> None:
        """Close lre's end of the channel (what lre's exit does) and reap the
        guardian, which kills whatever is still listed and exits."""
        with self._lock:
            fd, self._fd = self._fd, None
            self._gave_up = True
        if fd is None:
            return
        os.close(fd)
        if self._pid is not None:
            try:
                os.waitpid(self._pid, 0)
            except ChildProcessError:
                pass

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
        # Both ends close-on-exec; posix_spawn's dup2 clears it on the copy.
        theirs, ours = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        read_end = theirs.detach()
        try:
            self._pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid())],
                {},
                file_actions=[
                    *((os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable_fds() if fd > 2),
                    (os.POSIX_SPAWN_DUP2, read_end, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_DUP2, 1, 2),
                ],
                setsid=True,
            )
        except OSError as error:
            ours.close()
            log.warning(
                "cannot start the process guardian (%s); background children of "
                "actions may outlive an lre crash until the next start",
                error,
            )
            self._gave_up = True
            return
        finally:
            os.close(read_end)
        # Wait until it is untraceable and holds nothing of lre's but the
        # channel (once per lre, before the first action runs).
        try:
            ours.settimeout(_READY_TIMEOUT_S)
            ready = ours.recv(1)
            ours.settimeout(None)
            ours.shutdown(socket.SHUT_RD)
        except OSError:
            ready = b""
        if ready != _READY:
            log.warning(
                "the process guardian (pid %s) did not start; background children of "
                "actions may outlive an lre crash until the next start",
                self._pid,
            )
            ours.close()
            self._gave_up = True
            return
        self._fd = ours.detach()


def _inheritable_fds() -> list[int]:
    """lre's descriptors without close-on-exec (inherited from whoever started
    lre): the guardian closes them before it runs anything."""
    found = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    for name in names:
        try:
            if os.get_inheritable(int(name)):
                found.append(int(name))
        except OSError:
            continue
    return found


def _boot_ticks() -> int:
    """Now, in the clock ticks since boot that ``/proc/<pid>/stat`` gives a
    process's start in (0 where that clock is missing: nothing is then
    too old to be a spawn's child)."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    if clock is None:
        return 0
    return int(time.clock_gettime(clock) * os.sysconf("SC_CLK_TCK"))


def _process_table() -> list[tuple[int, int, int, int]]:
    """(pid, parent pid, process group, start in clock ticks since boot) of
    every process that can be read.

    Parsed here rather than with ``lre.hop.read_proc_stat``: the guardian runs
    as a file on its own and imports nothing of lre."""
    table: list[tuple[int, int, int, int]] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2 :].split()
        table.append((int(name), int(fields[1]), int(fields[2]), int(fields[19])))
    return table


def holders(
    spawns: dict[tuple[int, int], int], table: list[tuple[int, int, int, int]]
) -> list[tuple[int, int]]:
    """(pid, process group) of every process born since the earliest of the
    announced ``spawns`` (stdout file -> when its fork was announced) that
    holds one of those files open. Processes whose descriptors cannot be
    read (another user's) are skipped."""
    if not spawns:
        return []
    # the start time is truncated to a tick, so is the announcement's
    earliest = min(spawns.values())
    found = []
    for pid, _, group, born in table:
        if born < earliest or pid == os.getpid():
            continue
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            link = f"/proc/{pid}/fd/{name}"
            try:
                # only files: a pipe or socket is no action's stdout file
                if not os.readlink(link).startswith("/"):
                    continue
                info = os.stat(link)
            except OSError:
                continue
            if (info.st_dev, info.st_ino) in spawns:
                found.append((pid, group))
                break
    return found


def doomed(groups: set[int], pids: set[int], table: list[tuple[int, int, int, int]]) -> set[int]:
    """Members of ``groups``, the ``pids`` themselves, and every descendant of both."""
    children: dict[int, list[int]] = {}
    found: set[int] = set(pids)
    for pid, parent, group, _ in table:
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


def parse_command(line: bytes) -> tuple[bytes, int] | None:
    """``(kind, number)`` of one command line, or None when it is not one: an
    unknown kind, anything but decimal digits, or a number below 2."""
    kind, digits = line[:1], line[1:]
    if kind not in _KINDS or not digits.isdigit():
        return None
    number = int(digits)
    return (kind, number) if number >= 2 else None


def parse_spawn(line: bytes) -> tuple[bytes, tuple[int, ...]] | None:
    """``(kind, numbers)`` of a spawn's announcement (``>DEV:INO:TICKS``) or
    end (``<DEV:INO``), or None when ``line`` is not one."""
    kind, fields = line[:1], line[1:].split(b":")
    if len(fields) != _SPAWN_FIELDS.get(kind) or not all(f.isdigit() for f in fields):
        return None
    return kind, tuple(int(field) for field in fields)


def _refuse_tracing() -> None:
    """Make this process non-dumpable: processes of the same user can then not
    ptrace it, read its ``/proc`` descriptors or copy them (best effort)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _peer_is(stdin: int, lre: int) -> bool:
    """False when ``stdin`` is a Unix socket whose peer is not process ``lre``
    (any other kind of stdin, as in tests, is taken as it is)."""
    copy = os.dup(stdin)
    try:
        channel = socket.socket(fileno=copy)
    except OSError:  # not a socket
        os.close(copy)
        return True
    with channel:
        if channel.family != socket.AF_UNIX:
            return True
        try:
            raw = channel.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        except OSError:
            return False
    pid: int = struct.unpack("3i", raw)[0]
    return pid == lre


def serve(stdin: int = 0, lre: int | None = None) -> None:
    """The guardian's loop (see the module docstring); returns at end of file,
    at once when the channel's peer is not ``lre`` (lre's pid, when given)."""
    _refuse_tracing()
    for terminal_signal in (signal.SIGINT, signal.SIGHUP):
        signal.signal(terminal_signal, signal.SIG_IGN)
    if lre is not None and not _peer_is(stdin, lre):
        return
    try:
        os.write(stdin, _READY)
    except OSError:
        pass  # a pipe (tests): nobody waits
    groups: set[int] = set()
    pids: set[int] = set()
    #: announced spawns: stdout file (device, inode) -> announced at (ticks)
    spawns: dict[tuple[int, int], int] = {}
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
            spawn = parse_spawn(line)
            if spawn is not None:
                kind, numbers = spawn
                if kind == b">":
                    device, inode, born = numbers
                    spawns[device, inode] = born
                else:
                    device, inode = numbers
                    spawns.pop((device, inode), None)
                continue
            command = parse_command(line)
            if command is None:
                continue
            kind, number = command
            if kind == b"+":
                groups.add(number)
            elif kind == b"-":
                groups.discard(number)
            elif kind == b"*":
                pids.add(number)
            elif kind == b"/":
                pids.discard(number)
    if not (groups or pids or spawns):
        return
    try:
        table = _process_table() if os.path.isdir("/proc") else None
    except OSError:
        table = None
    if table is None:
        _signal_all(groups, pids, signal.SIGKILL)
        return
    for pid, group in holders(spawns, table):
        pids.add(pid)
        if group == pid:  # its own session made: the group is the action's
            groups.add(pid)
    # Stopped first, then looked for again until no new one appears (see
    # the module docstring).
    stopped: set[int] = set()
    for _ in range(_STOP_PASSES):
        found = doomed(groups, pids | stopped, table) - stopped
        _signal_all(groups, found, signal.SIGSTOP)
        stopped |= found
        if not found:
            break
        try:
            table = _process_table()
        except OSError:
            break
    _signal_all(groups, stopped | pids, signal.SIGKILL)


def _signal_all(groups: set[int], pids: set[int], sig: int) -> None:
    """Send ``sig`` to every group of ``groups`` and process of ``pids``
    (those already gone are skipped)."""
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


if __name__ == "__main__":
    # Descriptors lre had without close-on-exec are none of the guardian's
    # (lre closes the ones it knows of at spawn; this catches the rest).
    os.closerange(3, 1 << 20)
    serve(lre=int(sys.argv[1]) if len(sys.argv) > 1 else None)
