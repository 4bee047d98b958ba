"""A worker's own work directory: created private, locked, emptied at start.

``WorkDirectory.open(root, worker_name)`` owns ``{root}/{worker_name}/`` for
the lifetime of the object: the directory is created with mode 0700, an
exclusive ``flock`` is taken on ``{dir}/.lock`` (which records the holder's
pid), and everything a previous, crashed run of this worker left behind is
removed: its files, and processes still running inside the directory (the
background children of its actions, which the parent-death signal misses).
Nothing outside that directory is ever touched and symlinks found
inside it are removed, never followed.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import signal
import stat
from pathlib import Path

from lre.errors import FailedPrecondition, InvalidArgument

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


def remove_tree(path: Path) -> None:
    """Delete ``path`` (file, symlink or directory) without following symlinks.

    Directories an action made read-only or unsearchable are given back
    their owner's bits first. The walk is a loop holding one directory
    descriptor (and each level's pending names), never a recursion: a tree
    thousands of levels deep is removed like any other. A path that does not
    exist is ignored. Raises ``OSError`` when something still cannot be
    removed (or a directory was moved while it was being removed).
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(path)
        return
    fd = _open_directory(None, str(path))
    try:
        levels: list[tuple[str, tuple[int, int], list[str]]] = []
        pending = _clear_directory(fd)
        while True:
            if pending:
                name = pending.pop()
                child = _open_directory(fd, name)
                here = os.fstat(fd)
                levels.append((name, (here.st_dev, here.st_ino), pending))
                os.close(fd)
                fd = child
                pending = _clear_directory(fd)
                continue
            if not levels:
                break
            name, identity, pending = levels.pop()
            parent = os.open("..", _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = parent
            here = os.fstat(fd)
            if (here.st_dev, here.st_ino) != identity:
                raise OSError(errno.ESTALE, f"{path}: a directory moved while it was removed")
            os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_directory(parent: int | None, name: str) -> int:
    """Open the directory ``name`` (in ``parent``) without following a
    symlink, giving it mode 0700 first when its owner bits keep lre out."""
    try:
        return os.open(name, _DIRECTORY, dir_fd=parent)
    except PermissionError:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            raise
        os.chmod(name, 0o700, dir_fd=parent)
        return os.open(name, _DIRECTORY, dir_fd=parent)


def _clear_directory(fd: int) -> list[str]:
    """Unlink everything in the directory ``fd`` but its subdirectories,
    whose names are returned."""
    info = os.fstat(fd)
    if info.st_mode & 0o700 != 0o700 and info.st_uid == os.geteuid():
        os.fchmod(fd, 0o700)
    subdirectories: list[str] = []
    with os.scandir(fd) as listing:
        entries = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in listing]
    for name, is_directory in entries:
        if is_directory:
            subdirectories.append(name)
        else:
            os.unlink(name, dir_fd=fd)
    return subdirectories


class WorkDirectory:
    """The locked, private directory of one worker.

    Use ``WorkDirectory.open``; call ``close`` (or use it as a context
    manager) to release the lock. Action directories are created with
    ``new_action_dir`` and removed with ``remove_action_dir``.
    """

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self._lock_fd: int | None = lock_fd

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
        """Delete every entry of the directory except the lock file and the
        linked-inputs journal."""
        for entry in os.scandir(self.path):
            if entry.name not in (LOCK_NAME, JOURNAL_NAME):
                remove_tree(Path(entry.path))

    @property
    def journal_path(self) -> Path:
        """Where this worker's linked-inputs journal lives."""
        return self.path / JOURNAL_NAME

    def new_action_dir(self, action_id: str) -> Path:
        """Create an empty ``{dir}/{action_id}/`` (0700) and return its path.

        A leftover directory of the same name is removed first. Raises
        ``InvalidArgument`` when ``action_id`` is not a plain file name.
        """
        if not _SAFE_NAME.match(action_id) or action_id in (".", "..", LOCK_NAME, JOURNAL_NAME):
            raise InvalidArgument(f"action id {action_id!r} cannot name a directory")
        path = self.path / action_id
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:  # a leftover of a crashed run with the same id
            remove_tree(path)
            os.mkdir(path, 0o700)
        return path

    def remove_action_dir(self, path: Path) -> None:
        """Delete an action directory made by ``new_action_dir``."""
        if path.parent != self.path:
            raise ValueError(f"{path} is not an action directory of {self.path}")
        remove_tree(path)

    @property
    def locked(self) -> bool:
        return self._lock_fd is not None

    def close(self) -> None:
        """Release the lock (the directory and its contents stay)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

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
