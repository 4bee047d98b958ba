"""An action's ``/dev``: the few devices builds use, none of the host's others.

The host's ``/dev`` holds its disks (the one with lre's CAS, action cache
and state among them), loop devices, ``/dev/kmsg``, ``/dev/kvm``,
``/dev/fuse``, ttys... A read-only mount does not stop a device node from
being opened for writing, so a view that showed them would let a root
action rewrite lre's disk. ``mount_dev`` covers ``/dev`` of the calling
thread's mount namespace with a small read-only tmpfs holding only:

- ``null``, ``zero``, ``full``, ``random``, ``urandom``, ``tty``: each a bind
  mount of the host's node (read-only and ``nosuid,noexec``; a read-only
  mount still lets a device be written, which these need). A node the host
  does not have is left out. ``tty`` opens the action's controlling
  terminal: it has none (ENXIO) until it makes one on a pty of its own.
- ``pts``: a new devpts instance per action (``ptmxmode=0666``, so any user
  opens a pty; ``mode=0620``; no ``gid=``, which a user namespace may not
  map: a pty belongs to its opener's group, which glibc 2.33+ accepts). An
  action sees only its own ptys, never another action's or the host's.
- the symlinks ``ptmx`` -> ``pts/ptmx``, ``fd`` -> ``/proc/self/fd`` and
  ``stdin``, ``stdout``, ``stderr`` -> ``/proc/self/fd/0``, ``1``, ``2``;
- ``shm``: an empty directory, for the caller's fresh tmpfs.

The tree is made once per process as a template: a detached tmpfs with the
host's nodes bound into it (attaching a mount into a detached tree needs
Linux 6.15+). Each action then gets a recursive clone of it
(``open_tree(OPEN_TREE_CLONE|AT_RECURSIVE)``) attached over ``/dev``, and
its devpts. Where the kernel refuses the template, the same tree is built
in each action's namespace (``DevTree.mode``; the template costs about
100 us of a spawner thread per action, the tree built per action 3.6-5x
that).

Standard library only: the ``userns`` view helper loads this file by its
name (``_view_helper.py``). Every failing call raises ``OSError`` naming the
call and the path; the caller then abandons the namespace.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Literal

from lre.worker.view._mount_api import (
    AT_EMPTY_PATH,
    AT_FDCWD,
    AT_RECURSIVE,
    FSCONFIG_CMD_CREATE,
    FSCONFIG_SET_STRING,
    FSMOUNT_CLOEXEC,
    FSOPEN_CLOEXEC,
    MOUNT_ATTR_NODEV,
    MOUNT_ATTR_NOEXEC,
    MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
    MOVE_MOUNT_F_EMPTY_PATH,
    MS_NOEXEC,
    MS_NOSUID,
    OPEN_TREE_CLONE,
    failure,
    held,
    set_attributes,
    syscall,
)

__all__ = ["DEVICES", "DIRECTORIES", "LINKS", "NAMES", "DevTree", "mount_dev"]

#: The host's device nodes bound into the tree (absent ones left out).
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
#: name -> target of each symlink.
LINKS = {
    "ptmx": "pts/ptmx",
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}
#: ``pts`` (a devpts per action) and ``shm`` (the caller's tmpfs).
DIRECTORIES = ("pts", "shm")
#: Every name the tree may hold.
NAMES = frozenset((*DEVICES, *LINKS, *DIRECTORIES))

#: The tree's own tmpfs: a few inodes, no data.
_TREE_OPTIONS = (("mode", "0755"), ("size", "16k"), ("nr_inodes", "64"))
_PTS_OPTIONS = b"ptmxmode=0666,mode=0620"

Mode = Literal["template", "per-action"]


def _new_mount(fstype: str, options: tuple[tuple[str, str], ...], attributes: int) -> int:
    """A new, detached mount of ``fstype`` (its descriptor; the caller closes it)."""
    fs = syscall("fsopen", fstype, fstype.encode(), FSOPEN_CLOEXEC)
    try:
        for key, value in options:
            what = f"{fstype} {key}"
            syscall("fsconfig", what, fs, FSCONFIG_SET_STRING, key.encode(), value.encode(), 0)
        syscall("fsconfig", fstype, fs, FSCONFIG_CMD_CREATE, None, None, 0)
        return syscall("fsmount", fstype, fs, FSMOUNT_CLOEXEC, attributes)
    finally:
        os.close(fs)


def _attach(fd: int, where: int, path: str) -> None:
    """Attach the detached mount ``fd`` at ``path`` (relative to the
    directory ``where``, or absolute with ``AT_FDCWD``)."""
    syscall("move_mount", path, fd, b"", where, path.encode(), MOVE_MOUNT_F_EMPTY_PATH)


def _host_nodes() -> list[tuple[str, int]]:
    """Detached read-only clones of the host's ``DEVICES`` that exist."""
    nodes: list[tuple[str, int]] = []
    try:
        for name in DEVICES:
            path = f"/dev/{name}"
            if not os.path.exists(path):
                continue
            flags = OPEN_TREE_CLONE | os.O_CLOEXEC
            fd = syscall("open_tree", path, AT_FDCWD, path.encode(), flags)
            nodes.append((name, fd))
            set_attributes(
                path, set_=MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, fd=fd
            )
    except BaseException:
        for _, fd in nodes:
            os.close(fd)
        raise
    return nodes


def _skeleton(names: list[str]) -> int:
    """The tree's tmpfs, detached, read-only: empty files to bind ``names``
    over, ``DIRECTORIES`` and ``LINKS``."""
    tree = _new_mount(
        "tmpfs", _TREE_OPTIONS, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC
    )
    try:
        for name in names:
            os.close(os.open(name, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644, dir_fd=tree))
        for name in DIRECTORIES:
            os.mkdir(name, 0o755, dir_fd=tree)
        for name, target in LINKS.items():
            os.symlink(target, name, dir_fd=tree)
        set_attributes("/dev (tmpfs)", set_=MOUNT_ATTR_RDONLY, fd=tree)
    except BaseException:
        os.close(tree)
        raise
    return tree


def _mount_pts() -> None:
    """A new devpts instance at ``/dev/pts`` (the action's ptys only), by
    mount(2): one call instead of five with fsopen & co. (about 23 instead
    of 40 us of CPU, measured)."""
    flags = ctypes.c_ulong(MS_NOSUID | MS_NOEXEC)
    if held().mount(b"devpts", b"/dev/pts", b"devpts", flags, _PTS_OPTIONS) != 0:
        raise failure("mount devpts on", "/dev/pts")


class DevTree:
    """The ``/dev`` of this process's views (see the module docstring);
    thread-safe. ``template=False`` builds it per action whatever the
    kernel (to measure both)."""

    def __init__(self, *, template: bool = True) -> None:
        self._lock = threading.Lock()
        self._want_template = template
        #: The detached template tree (None: not made yet, or per-action).
        self._template: int | None = None
        self._mode: Mode | None = None

    @property
    def mode(self) -> Mode | None:
        """``template`` or ``per-action`` once the first view was made."""
        return self._mode

    def _choose(self) -> None:
        """Make the template, or settle for per action where the kernel
        refuses to attach into a detached tree (before Linux 6.15)."""
        if not self._want_template:
            self._mode = "per-action"
            return
        nodes = _host_nodes()
        try:
            tree = _skeleton([name for name, _ in nodes])
            try:
                for name, fd in nodes:
                    _attach(fd, tree, name)
                os.close(self._clone(tree))  # cloning must work too
            except OSError:
                os.close(tree)
                self._mode = "per-action"
                return
        finally:
            for _, fd in nodes:
                os.close(fd)
        self._template, self._mode = tree, "template"

    @staticmethod
    def _clone(tree: int) -> int:
        flags = OPEN_TREE_CLONE | os.O_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH
        return syscall("open_tree", "/dev (template)", tree, b"", flags)

    def mount(self) -> None:
        """Cover ``/dev`` of the calling thread's mount namespace with the
        tree and a new devpts. The first call reads the host's nodes at
        ``/dev``, so it must run where that is still the host's. Raises
        ``OSError``."""
        with self._lock:
            if self._mode is None:
                self._choose()
            template = self._template
        if template is not None:
            clone = self._clone(template)
            try:
                _attach(clone, AT_FDCWD, "/dev")
            finally:
                os.close(clone)
        else:
            nodes = _host_nodes()  # before /dev is covered
            try:
                tree = _skeleton([name for name, _ in nodes])
                try:
                    _attach(tree, AT_FDCWD, "/dev")
                finally:
                    os.close(tree)
                for name, fd in nodes:
                    _attach(fd, AT_FDCWD, f"/dev/{name}")
            finally:
                for _, fd in nodes:
                    os.close(fd)
        _mount_pts()


_PROCESS_TREE = DevTree()


def mount_dev() -> None:
    """Cover ``/dev`` of the calling thread's (new) mount namespace with the
    action's own (``DevTree.mount``, one template per process)."""
    _PROCESS_TREE.mount()
