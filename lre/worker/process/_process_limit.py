"""A per-action limit on processes, enforced by the kernel at fork time.

``workers[].local.max_processes`` bounds the tasks (processes and threads)
one action may have at once; a ``fork`` or ``clone`` past it fails with
EAGAIN, so a fork bomb cannot take the machine. What enforces it depends on
what lre may do here (measured on Linux 6.18, see docs/troubleshooting.md):

- **pids cgroup** (lre may create cgroups in the v1 ``pids`` hierarchy, e.g.
  as root): each action runs in a cgroup ``/sys/fs/cgroup/pids/lre-{pid}/a{n}/``
  of its own with ``pids.max``. The spawner thread moves itself into it just
  before the fork (v1 places threads, not only processes), so the action's
  first process is born inside and nothing escapes before it is counted; the
  thread stays until its next fork (it writes ``0``, itself, to ``tasks``: a
  migration by pid takes a global lock and waits for an RCU grace period,
  0.1-1 ms of wall time here, by ``0`` about 20 us; two per action were
  measurable), and cgroups whose action ended are reused rather than removed
  and made again, their files kept open (``_Cgroup``; the spawner thread
  starts the guardian before its first migration, so it never lands in one;
  see ``ProcessGuardian.start``). ``pids.events`` then tells whether a fork
  was refused; the action fails naming the limit. Works for every
  containment backend.
- **RLIMIT_NPROC in the action's user namespace** (``userns``, lre not root):
  ``prlimit --nproc`` runs inside the namespace ``unshare`` made, so the
  kernel (>= 5.14, through ucounts) counts only the processes of that
  namespace, not every process of the user. Whether the limit was hit is
  not reported by the kernel.
- Otherwise (``pidns`` or ``portable`` without cgroups, or anything as root,
  which RLIMIT_NPROC exempts): no limit; ``describe()`` says so at start-up.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from lre.errors import ResourceExhausted

__all__ = ["ProcessLimits", "limit_error", "process_limits"]

log = logging.getLogger(__name__)

_PIDS_ROOT = Path("/sys/fs/cgroup/pids")
CONFIG_KEY = "workers[].local.max_processes"


def limit_error(worker: str, operation: str, limit: int) -> ResourceExhausted:
    """The (logged) error of an action that hit the limit."""
    error = ResourceExhausted(
        f"worker {worker}: the action tried to run more than {limit} processes and threads "
        f"at once (a fork was refused); raise {CONFIG_KEY} if a real build needs more"
    )
    log.warning("worker %s: %s: %s", worker, operation, error)
    return error


def _own_cgroup(controller: str) -> str | None:
    """This thread's cgroup path in the v1 hierarchy of ``controller``."""
    try:
        text = Path("/proc/thread-self/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


class _Cgroup:
    """One action cgroup of this lre, with the descriptors of its ``tasks``,
    ``pids.current`` and ``pids.events`` kept open for as long as lre keeps
    the cgroup: each access on the spawn path is then one ``pwrite`` or
    ``pread`` instead of a path lookup, an open, the access and a close
    (a third of the CPU per access in a micro-measure, about half in the
    busy server; a read at offset 0 makes the kernel render the file afresh).
    All fields but the descriptors are guarded by ``ProcessLimits._lock``."""

    __slots__ = ("_fds", "finished", "limit", "occupied", "path", "refusals")

    def __init__(self, path: Path, limit: int) -> None:
        """Makes the cgroup with ``pids.max`` of ``limit`` plus the spawner
        thread; raises ``OSError`` (and leaves nothing behind) on failure."""
        path.mkdir()
        fds: list[int] = []
        try:
            _write(f"{path}/pids.max", str(limit + 1))
            fds.append(os.open(f"{path}/tasks", os.O_WRONLY | os.O_CLOEXEC))
            fds.append(os.open(f"{path}/pids.current", os.O_RDONLY | os.O_CLOEXEC))
            fds.append(os.open(f"{path}/pids.events", os.O_RDONLY | os.O_CLOEXEC))
        except BaseException:
            for fd in fds:
                os.close(fd)
            _rmdir(path)
            raise
        self.path = path
        self.limit = limit
        self._fds = tuple(fds)
        #: refused forks counted when its last action ended (0 when new, None
        #: when unknown): no fork can happen in a free cgroup, so this is the
        #: next action's baseline without reading pids.events again
        self.refusals: int | None = 0
        #: a spawner thread sits in it; its action ended
        self.occupied = False
        self.finished = False

    def join(self) -> None:
        """Moves the calling thread in. "0" is this thread: the kernel then
        moves one thread without the global threadgroup lock (and its RCU
        grace period) that naming a pid takes, about a fifth of the wall
        time here. Raises ``OSError`` (e.g. EAGAIN when full)."""
        os.pwrite(self._fds[0], b"0", 0)

    def current(self) -> int | None:
        """Tasks in it now (None when unreadable)."""
        try:
            return int(os.pread(self._fds[1], 32, 0))
        except (OSError, ValueError):
            return None

    def refused(self) -> int:
        """Forks it refused so far (the ``max`` counter of ``pids.events``;
        0 when unreadable)."""
        try:
            for line in os.pread(self._fds[2], 256, 0).splitlines():
                name, _, count = line.partition(b" ")
                if name == b"max":
                    return int(count)
        except (OSError, ValueError):
            pass
        return 0

    @property
    def descriptors(self) -> int:
        """How many descriptors it holds open (3, or 0 once closed)."""
        return len(self._fds)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = ()


class ProcessLimits:
    """Per-action pids cgroups of this lre process, or the lack of them."""

    def __init__(self, root: Path = _PIDS_ROOT) -> None:
        self.root = root
        self.base: Path | None = None
        self._numbers = itertools.count(1)
        #: every cgroup made (for ``descriptors``)
        self._made: list[_Cgroup] = []
        #: first pid of a running action -> its cgroup and refusals before it
        self._by_pid: dict[int, tuple[_Cgroup, int]] = {}
        #: cgroups free for another action
        self._idle: list[_Cgroup] = []
        #: spawner thread id -> the cgroup it sits in
        self._threads: dict[int, _Cgroup] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self.why_not = ""
        self._open()

    def _open(self) -> None:
        own = _own_cgroup("pids")
        if own is None or not (self.root / "tasks").exists():
            self.why_not = "no cgroup v1 pids hierarchy at /sys/fs/cgroup/pids"
            return
        self._home = self.root / own.lstrip("/")
        base = self.root / f"lre-{os.getpid()}"
        try:
            self._remove_stale()
            base.mkdir(exist_ok=True)
        except OSError as error:
            self.why_not = f"cannot create a pids cgroup ({error.strerror})"
            return
        self.base = base

    def _remove_stale(self) -> None:
        """Empty cgroups of lre processes that are gone."""
        for entry in self.root.glob("lre-*"):
            pid = entry.name[4:]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                for child in entry.iterdir():
                    if child.is_dir():
                        _rmdir(child)
                _rmdir(entry)

    @property
    def enforced_by_cgroup(self) -> bool:
        return self.base is not None

    def describe(self, containment: str) -> str:
        """How the limit is enforced for actions of ``containment`` here."""
        if self.base is not None:
            return "pids cgroup per action"
        if containment == "userns" and os.geteuid() != 0:
            return "RLIMIT_NPROC in the action's user namespace"
        return f"not enforced ({self.why_not}; RLIMIT_NPROC does not bound root)"

    def command(
        self, containment: str, command: Sequence[str], limit: int, open_files: int = 0
    ) -> list[str]:
        """``command`` with ``prlimit`` placed inside the action's own user
        namespace when that is how the limit is enforced: after the ``--`` of
        the ``unshare`` that makes it (an ``nsenter`` into the backend's
        shared namespaces may come first, where the limit would count every
        action's processes). That ``prlimit`` also sets ``open_files``
        (``RLIMIT_NOFILE``, soft and hard; 0: not), before anything of the
        action runs."""
        if not limit or self.base is not None or containment != "userns":
            return list(command)
        argv = list(command)
        starts = [i for i, arg in enumerate(argv) if os.path.basename(arg) == "unshare"]
        if os.geteuid() == 0 or not starts or "--" not in argv[starts[0] :]:
            return argv
        at = argv.index("--", starts[0]) + 1
        nofile = [f"--nofile={open_files}:{open_files}"] if open_files > 0 else []
        nproc = f"--nproc={limit}:{limit}"
        return [*argv[:at], "prlimit", nproc, *nofile, "--", *argv[at:]]

    @contextmanager
    def around_fork(self, limit: int) -> Iterator[None]:
        """In the spawner thread, around the fork of one action's first
        process: the thread moves into a cgroup of ``limit`` tasks (plus
        itself) and stays there until its next fork, so each spawn costs at
        most one migration, none when the thread's last action ended and left
        its cgroup empty; cgroups are reused, not made per action (see
        ``_release``). Raises ``OSError`` when the cgroup cannot be made or
        joined."""
        self._local.pending = None
        if not limit or self.base is None:
            yield
            return
        previous: _Cgroup | None = getattr(self._local, "sitting", None)
        if previous is not None and self._reusable_in_place(previous, limit):
            # The thread's last action ended and left nothing: no migration.
            self._local.pending = (previous, self._baseline(previous))
            yield
            return
        group = self._take(limit)
        try:
            baseline = self._baseline(group)
            group.join()
        except BaseException:
            self._release(group)
            raise
        self._local.sitting = group
        with self._lock:
            group.occupied = True
            self._threads[threading.get_native_id()] = group
            release_previous = previous is not None and previous.finished
            if previous is not None:
                previous.occupied = False
        if previous is not None and release_previous:
            self._release(previous)
        self._local.pending = (group, baseline)
        yield

    def _baseline(self, group: _Cgroup) -> int:
        with self._lock:
            known = group.refusals
        return group.refused() if known is None else known

    def _reusable_in_place(self, group: _Cgroup, limit: int) -> bool:
        """Whether the cgroup this thread sits in is free: its action ended
        and only the thread itself is left in it."""
        with self._lock:
            if not group.finished or group.limit != limit:
                return False
        if group.current() != 1:
            return False
        with self._lock:
            group.finished = False
        return True

    def _take(self, limit: int) -> _Cgroup:
        with self._lock:
            for at, group in enumerate(self._idle):
                if group.limit == limit:
                    del self._idle[at]
                    return group
        group = _Cgroup(self.base / f"a{next(self._numbers)}", limit)  # type: ignore[operator]
        with self._lock:
            self._made.append(group)
        return group

    @property
    def descriptors(self) -> int:
        """Descriptors the cgroups hold open: bounded by the most actions
        that ran at once (cgroups are reused), never one per action; what a
        leak check of lre's descriptors must allow for."""
        with self._lock:
            return sum(group.descriptors for group in self._made)

    def _release(self, group: _Cgroup) -> None:
        """``group``'s action ended and no spawner thread sits in it: back to
        the idle cgroups when empty (a process that outlived its action, under
        ``portable``, keeps it out until lre exits; its descriptors are then
        closed, as lre never looks at it again)."""
        with self._lock:
            if group.occupied:
                group.finished = True
                return
            group.finished = False
        if group.current() == 0:
            with self._lock:
                self._idle.append(group)
        else:
            group.close()  # nothing refers to it any more
            with self._lock:
                self._made.remove(group)

    def started(self, pid: int) -> None:
        """``pid`` was forked by this thread inside ``around_fork``."""
        pending = getattr(self._local, "pending", None)
        self._local.pending = None
        if pending is not None:
            with self._lock:
                self._by_pid[pid] = pending

    def abandoned(self) -> None:
        """The fork inside ``around_fork`` failed: its cgroup is free again."""
        pending = getattr(self._local, "pending", None)
        self._local.pending = None
        if pending is not None:
            with self._lock:
                pending[0].refusals = None  # read afresh next time
            self._release(pending[0])

    def ended(self, pid: int) -> bool:
        """The action whose first process was ``pid`` ended and was reaped:
        whether a fork of it was refused."""
        with self._lock:
            pending = self._by_pid.pop(pid, None)
        if pending is None:
            return False
        group, baseline = pending
        refused = group.refused()
        with self._lock:
            group.refusals = refused
        self._release(group)
        return refused > baseline

    def close(self) -> None:
        """Move the spawner threads home and remove the cgroups (at exit);
        what cannot be removed yet goes when the next lre starts. The
        cgroups' descriptors stay open until lre exits: a removed cgroup's
        files then fail with ENODEV, so a spawner thread still at work
        cannot write into a file that reused a closed descriptor's number."""
        if self.base is not None:
            with self._lock:
                threads = list(self._threads)
            for tid in threads:
                try:
                    _write(f"{self._home}/tasks", str(tid))
                except OSError:
                    pass  # the thread is gone
            for child in self.base.iterdir():
                if child.is_dir():
                    _rmdir(child)
            _rmdir(self.base)


def _write(path: str, data: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)


def _rmdir(path: Path) -> None:
    try:
        os.rmdir(path)
    except OSError as error:
        log.debug("cannot remove cgroup %s yet: %s", path, error)


_LIMITS: ProcessLimits | None = None
_LIMITS_LOCK = threading.Lock()


def process_limits() -> ProcessLimits:
    """The process-wide ``ProcessLimits`` (made on first use)."""
    global _LIMITS
    with _LIMITS_LOCK:
        if _LIMITS is None:
            _LIMITS = ProcessLimits()
            atexit.register(_LIMITS.close)
        return _LIMITS
