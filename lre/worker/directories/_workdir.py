"""A worker's own work directory: created private, locked, emptied at start.

``WorkDirectory.open(root, worker_name)`` owns ``{root}/{worker_name}/`` for
the lifetime of the object: the directory is created with mode 0700, an
exclusive ``flock`` is taken on ``{dir}/.lock`` (which records the holder's
pid), and everything a previous, crashed run of this worker left behind is
removed: its files, and processes still running inside the directory (the
background children of its actions, which the parent-death signal misses).
Mounts an action left below the directory are detached first; an entry that
still cannot be removed (an immutable file, a directory of another user) is
moved into the quarantine (``_quarantine.py``) and start-up goes on: leftovers
never keep lre from starting. Nothing outside that directory is ever touched,
no mount point below it is crossed and symlinks found inside it are removed,
never followed (``_removal.py``).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import signal
import stat
from pathlib import Path

from lre.errors import FailedPrecondition, InvalidArgument
from lre.worker.directories._quarantine import QUARANTINE_NAME, RETRY_S, Quarantine
from lre.worker.directories._removal import MountTable, remove_tree

__all__ = ["JOURNAL_NAME", "LOCK_NAME", "WorkDirectory", "WorkDirectoryInUse", "remove_tree"]

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
#: Kept across restarts (``_input_journal.py`` reads it before it is emptied).
JOURNAL_NAME = "linked-inputs.journal"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


class WorkDirectoryInUse(FailedPrecondition):
    """Another live process holds the lock of a worker's work directory.

    ``holder_pid`` is the pid recorded in the lock file (``None`` when it
    could not be read).
    """

    def __init__(self, path: Path, holder_pid: int | None) -> None:
        self.path = path
        self.holder_pid = holder_pid
        holder = f"pid {holder_pid}" if holder_pid is not None else "an unknown process"
        super().__init__(
            f"work_directory {str(path)!r} is in use by another lre ({holder}); "
            "stop it or give this worker another work_directory"
        )


class WorkDirectory:
    """The locked, private directory of one worker.

    Use ``WorkDirectory.open``; call ``close`` (or use it as a context
    manager) to release the lock. Action directories are created with
    ``new_action_dir`` and removed with ``remove_action_dir``.
    """

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self._lock_fd: int | None = lock_fd
        self.mounts = MountTable()
        #: Where entries that cannot be removed are moved aside.
        self.quarantine = Quarantine(path, self.mounts)
        #: Names of entries that could be neither removed nor moved aside:
        #: never given to a new action directory.
        self.stuck: set[str] = set()

    @classmethod
    def open(cls, root: str | os.PathLike[str], worker_name: str) -> WorkDirectory:
        """Create, lock and empty ``{root}/{worker_name}/``.

        Raises ``InvalidArgument`` when ``worker_name`` is not a plain file
        name, ``WorkDirectoryInUse`` naming the holder's pid when another
        process holds the lock, ``FailedPrecondition`` when the path exists but
        is not a directory, and ``OSError`` for other filesystem failures.
        """
        if not _SAFE_NAME.match(worker_name) or worker_name in (".", ".."):
            raise InvalidArgument(
                f"workers[].name: {worker_name!r} cannot name a work directory "
                "(use letters, digits, '.', '_' and '-')"
            )
        root_path = Path(root).absolute()
        root_path.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = root_path / worker_name
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode):
                raise FailedPrecondition(
                    f"work_directory {str(path)!r} exists and is not a directory"
                ) from None
            if info.st_uid != os.getuid():
                raise FailedPrecondition(
                    f"work_directory {str(path)!r} belongs to uid {info.st_uid}, not to lre"
                ) from None
            os.chmod(path, 0o700)
        lock_fd = os.open(
            path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        directory: WorkDirectory | None = None
        try:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                raise WorkDirectoryInUse(path, _read_pid(lock_fd)) from None
            os.ftruncate(lock_fd, 0)
            os.pwrite(lock_fd, f"{os.getpid()}\n".encode(), 0)
            directory = cls(path, lock_fd)
            directory.kill_leftover_processes()
            directory.remove_leftovers()
        except BaseException:
            os.close(lock_fd)
            if directory is not None:
                directory.mounts.close()
            raise
        return directory

    def kill_leftover_processes(self) -> list[int]:
        """SIGKILL processes a crashed run of this worker left behind; return their pids.

        The guardian kills what is left of running actions when lre dies; this
        is the last line behind it (a guardian that could not start, or died
        with lre). We hold the lock, so no live lre runs actions here: any
        process of our user whose working directory is inside this directory
        is such a leftover. Processes elsewhere are never
        touched. Errors reading /proc (a process exiting meanwhile) are ignored.
        """
        prefix = str(self.path) + os.sep
        uid = os.getuid()
        me = os.getpid()
        killed: list[int] = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                if entry.stat().st_uid != uid:
                    continue
                cwd = os.readlink(f"/proc/{entry.name}/cwd")
            except OSError:
                continue
            if cwd.startswith(prefix):
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed.append(int(entry.name))
                except OSError:
                    continue
        return killed

    def remove_leftovers(self) -> None:
        """Delete every entry of the directory except the lock file, the
        linked-inputs journal and the quarantine (detaching mounts below it
        first; what cannot be removed is quarantined), then retry the
        quarantined entries. Logs, once, what stays quarantined. Raises
        ``OSError`` only when the directory itself cannot be read."""
        self.mounts.detach_below(self.path)
        with os.scandir(self.path) as listing:
            names = [entry.name for entry in listing]
        for name in names:
            kept = name in (LOCK_NAME, JOURNAL_NAME, QUARANTINE_NAME)
            if not kept and not self.quarantine.clear(self.path / name):
                self.stuck.add(name)
        left = self.quarantine.retry()
        if left:
            log.warning(
                "worker directory %s: %d leftover(s) could not be removed and stay in %s "
                "(retried every %d minutes and at each start): %s. See 'Quarantined "
                "leftovers' in docs/troubleshooting.md",
                self.path,
                len(left),
                self.quarantine.path,
                RETRY_S // 60,
                "; ".join(f"{entry.path.name}: {entry.reason}" for entry in left),
            )

    @property
    def journal_path(self) -> Path:
        """Where this worker's linked-inputs journal lives."""
        return self.path / JOURNAL_NAME

    def new_action_dir(self, action_id: str) -> Path:
        """Create an empty ``{dir}/{action_id}/`` (0700) and return its path.

        A leftover directory of the same name is removed (or quarantined)
        first. Raises ``InvalidArgument`` when ``action_id`` is not a plain
        file name, ``OSError`` when the directory cannot be made.
        """
        reserved = (".", "..", LOCK_NAME, JOURNAL_NAME, QUARANTINE_NAME)
        if not _SAFE_NAME.match(action_id) or action_id in reserved:
            raise InvalidArgument(f"action id {action_id!r} cannot name a directory")
        path = self.path / action_id
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:  # a leftover of a crashed run with the same id
            if not self.quarantine.clear(path):
                self.stuck.add(action_id)
                raise
            os.mkdir(path, 0o700)
        return path

    def remove_action_dir(self, path: Path) -> None:
        """Delete an action directory made by ``new_action_dir``; one that
        cannot be deleted is quarantined. Raises ``OSError`` only when it could
        be neither (it stays, and its name is never reused)."""
        if path.parent != self.path:
            raise ValueError(f"{path} is not an action directory of {self.path}")
        if not self.quarantine.clear(path):
            self.stuck.add(path.name)
            raise OSError(errno.EBUSY, "could be neither removed nor quarantined", str(path))

    @property
    def locked(self) -> bool:
        return self._lock_fd is not None

    def close(self) -> None:
        """Release the lock (the directory and its contents stay)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        self.mounts.close()

    def __enter__(self) -> WorkDirectory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text)
    except (OSError, ValueError):
        return None
