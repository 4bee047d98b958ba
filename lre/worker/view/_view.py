"""An action's view of the filesystem: one mount namespace per action.

``build_view(view)`` runs in a spawner thread that has just left lre's mount
namespace for a new one (``unshare(CLONE_NEWNS)``, see ``_containment.py``)
and shapes that namespace, which the action's first process then inherits:

- the host's files, every mount of them, read-only (``mount_setattr`` with
  ``AT_RECURSIVE`` and private propagation: one call, whatever the number
  of mounts; nothing mounted here ever reaches the host, and nothing the
  host mounts later reaches the view, where a slave would get it with the
  host's flags, writable);
- the action's input root, at its own path, as an overlay whose lower layer
  is the staged tree (hardlinks to the CAS's own inodes) and whose upper
  layer is ``upper`` on the action's own tmpfs (``make_layers``: a detached
  mount the view builder holds, named through ``/proc/self/fd/N``, so the
  upper and work directories are on no path of the host's): whatever the
  action writes, chmods or truncates, an input included and through any path
  (``/proc/self/fd`` too), lands in a copy in the upper layer, so the CAS
  inode cannot change (root included: the lower layer is never written).
  Outputs are therefore read from the upper layer over the staged tree
  (``_layers``, through lre's own descriptor of that tmpfs;
  ``OVERLAY_OPTIONS`` keeps the upper layer simple enough for that), and
  after that the whole tmpfs is dropped, nothing in it walked. overlayfs
  keeps its marks (opaque directories: a directory holding
  inputs removed, or removed and made again) in xattrs, in the namespace
  the view names (``ActionView.xattrs``): ``trusted.overlay.*`` where lre
  mounts it with ``CAP_SYS_ADMIN`` of the host (``pidns``), or
  ``user.overlay.*`` (the ``userxattr`` option, Linux 5.11+) where it is
  mounted inside a user namespace (``userns``), which cannot write
  ``trusted.*`` at all (the rmdir would fail with EIO inside the action).
  A kernel without ``userxattr`` fails the view (``fsconfig``, EINVAL);
  mainline kernels before 5.11 mount no overlay in a user namespace at
  all. Layers on a detached mount need a recent kernel (checked on 6.18;
  one that refuses them fails every view, naming the ``fsconfig`` call).
  The overlay is ``volatile`` (its unmount syncs nothing);
- the action's private temporary directory (its ``TMPDIR``) writable at its
  own path; the action's tmpfs (``ActionView.layers``) shown at ``/tmp`` and
  at ``/dev/shm``, so those two and the input root's writes are bounded
  together by its size (``ActionView.tmpfs_bytes``);
- a ``/dev`` of its own (``_view_dev.mount_dev``): null, zero, full, random,
  urandom, tty, a new devpts instance and the usual symlinks, none of the
  host's disks or other devices;
- every mount the action may write (input root, ``TMPDIR``, ``/tmp``,
  ``/dev/shm``, writable paths) ``nodev`` and ``nosuid``: a device node it
  makes there (root may ``mknod``) does not open;
- configured writable host paths (like Bazel's ``--sandbox_writable_path``),
  bound writable at their own paths: each opened with no symlink and judged
  by device and inode (``_view_writable``), then cloned from that descriptor
  and attached on it (never looked up by its path again; one under the
  view's fresh ``/tmp`` or ``/dev/shm`` is attached at its path there,
  in a tmpfs only this view has);
- lre's own directories (state, stores, temporary and work roots: ``hidden``)
  each covered by an empty read-only tmpfs, so the CAS, the action cache,
  journals, logs, idle and other actions' directories are not there by any
  path; only the action's own root and tmp are mounted back inside. A
  hidden regular file (a bearer token, a TLS key) shows ``/dev/null``. One
  lying inside a writable path is masked on the very directory lre found
  at start-up (``ActionView.hidden_marks``), not on whatever its path
  leads to now; if it is gone or replaced the view is refused;
- the same masks over the host's connectable sockets that run commands for
  whoever connects (``_socket_masks``: tmux, systemd, D-Bus, container
  engines), a socket file showing ``/dev/null``; the few paths ``shown``
  (a socket the user handed in, ``/run/systemd/resolve``) bound back,
  read-only, at their own paths inside the masks or the fresh ``/tmp``.

``/proc``: a procfs shows the PID namespace its mounter names. Where the
kernel takes procfs's ``pidns=`` option (Linux 6.15+, ``proc_pidns_works``)
the spawner mounts it itself once the action's first process exists
(``mount_children_proc``: ``pidns=`` names the namespace of the thread's
children, which opens only after that first fork), and the first process
waits at a gate until then (``_pid_namespace.PidNamespace``). Elsewhere the
first process makes it (util-linux ``unshare --mount-proc``: an extra mount
namespace per action, copied from the view and torn down at its end).

Every failing call raises ``OSError`` naming the call and the path; the
caller then abandons the namespace (nothing was started in it).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from dataclasses import dataclass
from typing import Literal

# The view helper loads these by their file names under these names first.
from lre.worker.view._mount_api import (
    AT_EMPTY_PATH,
    AT_FDCWD,
    AT_RECURSIVE,
    FSCONFIG_CMD_CREATE,
    FSCONFIG_SET_FD,
    FSCONFIG_SET_FLAG,
    FSCONFIG_SET_STRING,
    FSMOUNT_CLOEXEC,
    FSOPEN_CLOEXEC,
    LIBC,
    MOUNT_ATTR_IDMAP,
    MOUNT_ATTR_NODEV,
    MOUNT_ATTR_NOEXEC,
    MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
    MOVE_MOUNT_F_EMPTY_PATH,
    MOVE_MOUNT_T_EMPTY_PATH,
    MS_NODEV,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    OPEN_TREE_CLOEXEC,
    OPEN_TREE_CLONE,
    failure,
    held,
    set_attributes,
    syscall,
)
from lre.worker.view._view_dev import mount_dev
from lre.worker.view._view_writable import (
    Mark,
    Protected,
    WritableRefused,
    identity,
    judge,
    open_without_symlinks,
)

__all__ = [
    "ActionView",
    "OverlayXattrs",
    "build_view",
    "covered_by",
    "make_layers",
    "mount_children_proc",
    "outermost",
    "overlay_mount",
    "proc_pidns_works",
]

#: What every mount an action may write carries: a device node made there
#: does not open, a setuid bit does not raise.
_WRITABLE_ATTRS = MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID
_RESOLV_CONF = "/etc/resolv.conf"

#: The tmpfs shown at /tmp and /dev/shm of each action when no size is
#: given (``ActionView.tmpfs_bytes``; pages are only used when written, and
#: charged to the writer's memory cgroup; the sampler counts them as the
#: action's memory).
TMPFS_OPTIONS = "mode=1777,size=50%"  # the size as ``_tmpfs_size`` gives it
#: Set whatever the kernel's defaults: the upper layer then holds only what
#: ``_layers`` knows how to merge again (no directory redirected to another
#: lower path, no file whose data stayed below). ``nofollow``, not ``off``:
#: an overlay in a user namespace accepts only that one (and never follows
#: a redirect). Renaming an input directory fails with EXDEV inside the
#: action (``mv`` copies instead).
OVERLAY_OPTIONS = (("redirect_dir", "nofollow"), ("metacopy", "off"), ("index", "off"))
#: The xattr namespace an overlay keeps its marks in: ``trusted``
#: (``trusted.overlay.opaque`` & co., writable only with ``CAP_SYS_ADMIN``
#: of the host) or ``user`` (``user.overlay.*``: mounted with ``userxattr``,
#: what an overlay mounted inside a user namespace needs).
OverlayXattrs = Literal["trusted", "user"]
#: The empty tmpfs covering one of lre's directories.
_MASK_OPTIONS = "mode=0755,size=64k,nr_inodes=4096"
#: The mode of the overlay's upper layer, whose own mode is the one the
#: action sees on its input root (0700 would shut out any user the action
#: switches to).
LAYER_MODE = 0o755


@dataclass(frozen=True, slots=True)
class ActionView:
    """What one action's namespace shows (host paths, all absolute)."""

    #: The staged input root: the overlay's lower layer, mounted over itself.
    root: str
    #: The overlay's upper layer (the action's writes, outputs included);
    #: its own mode and owner are those the action sees on its input root.
    upper: str
    #: The overlay's work directory (same filesystem as ``upper``).
    work: str
    #: The action's private temporary directory, writable at its own path.
    tmp: str
    #: Where the overlay keeps its marks: ``user`` mounts it with
    #: ``userxattr`` (a view built inside a user namespace must), and
    #: whoever reads its upper layer again must look there (``_layers``).
    xattrs: OverlayXattrs
    #: lre's directories, each covered by an empty read-only tmpfs (none
    #: inside another: ``outermost``).
    hidden: tuple[str, ...] = ()
    #: Host paths bound writable at their own paths (existing directories),
    #: each opened with no symlink and judged (``_view_writable``).
    writable: tuple[str, ...] = ()
    #: Host paths (files, sockets or directories) bound read-only at their
    #: own paths where a mask or the fresh ``/tmp`` covers them; those
    #: missing when the view is built are skipped.
    shown: tuple[str, ...] = ()
    #: The marks of lre's directories among ``hidden`` as lre found them
    #: (label: the path): no writable path may be or lie inside one, and
    #: the mask of one inside a writable path goes on that very directory.
    hidden_marks: tuple[Mark, ...] = ()
    #: More directories no writable path may be or lie inside (lre's
    #: installation, the user's home).
    within: tuple[Mark, ...] = ()
    #: Directories no writable path may be: those holding one of ``within``
    #: (labelled with what they hold).
    containing: tuple[Mark, ...] = ()
    #: A user namespace (descriptor) whose mapping the lower layer is shown
    #: through (``_idmap.InputIdmap``: lre's files as the action user's);
    #: None: as it is.
    idmap: int | None = None
    #: Size of the one tmpfs shown at /tmp and /dev/shm (bytes; 0: the
    #: share of RAM ``TMPFS_OPTIONS`` names).
    tmpfs_bytes: int = 0
    #: A host file shown read-only where ``/etc/resolv.conf`` leads (the
    #: actions' own nameservers, ``_action_dns``); None: the host's.
    resolv_conf: str | None = None
    #: A descriptor, in the process building the view, of the action's own
    #: tmpfs (``make_layers``: a detached mount holding ``upper`` and
    #: ``work``, which ``upper`` and ``work`` name through it): it becomes
    #: the one tmpfs shown at /tmp and /dev/shm, so the input root's writes,
    #: ``/tmp`` and ``/dev/shm`` share its bound and are dropped together.
    #: -1: a tmpfs of ``tmpfs_bytes`` is made for /tmp and /dev/shm alone.
    layers: int = -1


def _mount_tmpfs(path: str, options: str, flags: int = MS_NOSUID | MS_NODEV) -> None:
    if (
        held().mount(b"tmpfs", path.encode(), b"tmpfs", ctypes.c_ulong(flags), options.encode())
        != 0
    ):
        raise failure("mount tmpfs on", path)


def _tmpfs_size(size_bytes: int) -> str:
    """The ``size`` option of an action's tmpfs (0: ``TMPFS_OPTIONS``'s)."""
    return "50%" if size_bytes <= 0 else str(size_bytes)


def make_layers(size_bytes: int) -> int:
    """A fresh tmpfs of ``size_bytes`` (0: half of RAM) for one action, as a
    detached mount (``nodev``, ``nosuid``) holding the overlay's ``upper``
    (``LAYER_MODE``: the mode the action sees on its input root; the caller
    gives it to the action's user) and ``work`` (0700); its
    descriptor, for the caller to close. Nothing is walked to undo an
    action: closing the last descriptor (and the view holding it) frees
    the whole filesystem. Raises ``OSError`` naming the refused call."""
    fs = syscall("fsopen", "tmpfs", b"tmpfs", FSOPEN_CLOEXEC)
    try:
        for key, value in (("size", _tmpfs_size(size_bytes)), ("mode", "0755")):
            syscall("fsconfig", key, fs, FSCONFIG_SET_STRING, key.encode(), value.encode(), 0)
        syscall("fsconfig", "tmpfs", fs, FSCONFIG_CMD_CREATE, None, None, 0)
        mount = syscall("fsmount", "tmpfs", fs, FSMOUNT_CLOEXEC, _WRITABLE_ATTRS)
    finally:
        os.close(fs)
    try:
        os.mkdir("upper", LAYER_MODE, dir_fd=mount)
        os.chmod("upper", LAYER_MODE, dir_fd=mount)  # the umask may have dropped bits
        os.mkdir("work", 0o700, dir_fd=mount)
    except BaseException:
        os.close(mount)
        raise
    return mount


def _mount_private_tmpfs(size_bytes: int, layers: int = -1) -> None:
    """One tmpfs shown at /tmp and at /dev/shm, so that what an action keeps
    in both is bounded together: the action's ``layers`` (``make_layers``,
    also holding its input root's writes) or, when -1, a new one of
    ``size_bytes`` (0: ``TMPFS_OPTIONS``), is attached at /dev/shm, a
    world-writable sticky directory for each is made in it, /tmp is bound to
    one and /dev/shm covered by the other (neither shows the other; the
    tmpfs's own root, with the overlay's layers, is out of reach below).
    Raises ``OSError``."""
    if layers >= 0:
        _attach(layers, "/dev/shm")
    else:
        _mount_tmpfs("/dev/shm", f"mode=1777,size={_tmpfs_size(size_bytes)}")
    fds: list[int] = []
    try:
        for name in ("tmp", "shm"):
            inside = f"/dev/shm/{name}"
            os.mkdir(inside, 0o700)
            os.chmod(inside, 0o1777)
            fds.append(_clone_tree(inside))
        _attach(fds[0], "/tmp")
        _attach(fds[1], "/dev/shm")
    finally:
        for fd in fds:
            os.close(fd)


def _clone_tree(path: str, *, fd: int = AT_FDCWD, release: bool = False) -> int:
    """A detached, writable copy of the mounts at ``path`` (bind +
    recursive), or at the opened directory ``fd`` (``path`` then only names
    it): the very object ``fd`` refers to, not whatever ``path`` leads to now."""
    opened = fd != AT_FDCWD
    flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | (AT_EMPTY_PATH if opened else 0)
    target = b"" if opened else path.encode()
    return syscall("open_tree", path, fd, target, flags, release=release)


def _writable_clone(path: str, *, fd: int = AT_FDCWD, release: bool = False) -> int:
    """``_clone_tree`` of a path the action may write, made ``nodev`` and
    ``nosuid`` (every mount of it); ``release``: the GIL dropped for the
    clone (a configured path)."""
    clone = _clone_tree(path, fd=fd, release=release)
    try:
        set_attributes(path, set_=_WRITABLE_ATTRS, recursive=True, fd=clone)
    except BaseException:
        os.close(clone)
        raise
    return clone


def _attach_onto(fd: int, target: int, path: str) -> None:
    """Attach the detached mount ``fd`` on the opened directory or file
    ``target`` (named ``path``), with no lookup of ``path``."""
    flags = MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH
    syscall("move_mount", path, fd, b"", target, b"", flags, release=True)


def _attach(fd: int, path: str, *, release: bool = False) -> None:
    syscall(
        "move_mount",
        path,
        fd,
        b"",
        AT_FDCWD,
        path.encode(),
        MOVE_MOUNT_F_EMPTY_PATH,
        release=release,
    )


def _proc_with_pidns(pidns: str) -> int:
    """A procfs superblock's context showing the PID namespace at ``pidns``
    (a namespace file), created but not mounted; the caller closes it."""
    fs = syscall("fsopen", "proc", b"proc", FSOPEN_CLOEXEC)
    try:
        syscall("fsconfig", pidns, fs, FSCONFIG_SET_STRING, b"pidns", pidns.encode(), 0)
        syscall("fsconfig", pidns, fs, FSCONFIG_CMD_CREATE, None, None, 0)
    except BaseException:
        os.close(fs)
        raise
    return fs


def proc_pidns_works() -> bool:
    """Whether this kernel mounts a procfs for a named PID namespace
    (``pidns=``, Linux 6.15+) for this process (it needs ``CAP_SYS_ADMIN``)."""
    if LIBC is None:
        return False
    try:
        os.close(_proc_with_pidns("/proc/self/ns/pid"))
    except OSError:
        return False
    return True


def mount_children_proc(*, read_only: bool = False) -> None:
    """Mount at ``/proc`` of the calling thread's mount namespace a procfs of
    the PID namespace its children are born in (``nosuid,nodev,noexec``, as
    util-linux mounts it, and ``ro`` when ``read_only``: uid 0 may write most
    of ``/proc/sys`` without any capability), over the host's. Only once the
    thread forked the namespace's first process: before that the namespace
    cannot be named. Raises ``OSError`` naming the call."""
    fs = _proc_with_pidns("/proc/thread-self/ns/pid_for_children")
    try:
        mount = syscall(
            "fsmount",
            "/proc",
            fs,
            FSMOUNT_CLOEXEC,
            MOUNT_ATTR_NOSUID
            | MOUNT_ATTR_NODEV
            | MOUNT_ATTR_NOEXEC
            | (MOUNT_ATTR_RDONLY if read_only else 0),
        )
    finally:
        os.close(fs)
    try:
        _attach(mount, "/proc")
    finally:
        os.close(mount)


def _overlay_flags(xattrs: OverlayXattrs) -> tuple[str, ...]:
    """The overlay's flag options besides ``OVERLAY_OPTIONS``: always
    ``volatile``, and ``userxattr`` for marks in ``user.overlay.*``."""
    return ("volatile", "userxattr") if xattrs == "user" else ("volatile",)


def _idmapped_lower(fs: int, path: str, userns: int) -> int:
    """Give the overlay being configured (``fs``) a lower layer that is a
    detached clone of ``path`` shown through the mapping of ``userns``;
    returns the clone, which must stay open until the overlay is created
    (closing a detached mount's last descriptor dissolves it)."""
    tree = _clone_tree(path)
    try:
        set_attributes(path, set_=MOUNT_ATTR_IDMAP, recursive=True, fd=tree, userns=userns)
        syscall("fsconfig", path, fs, FSCONFIG_SET_FD, b"lowerdir+", None, tree)
    except BaseException:
        os.close(tree)
        raise
    return tree


def overlay_mount(view: ActionView) -> int:
    """The input root's overlay as a detached mount (paths resolved now,
    while nothing covers them); its lower layer idmapped when ``view.idmap``
    names a user namespace. Raises ``OSError`` naming the refused call."""
    fs = syscall("fsopen", "overlay", b"overlay", FSOPEN_CLOEXEC)
    tree = -1
    try:
        if view.idmap is not None:
            tree = _idmapped_lower(fs, view.root, view.idmap)
        lower = () if view.idmap is not None else (("lowerdir", view.root),)
        for key, value in (
            *lower,
            ("upperdir", view.upper),
            ("workdir", view.work),
            *OVERLAY_OPTIONS,
        ):
            syscall("fsconfig", value, fs, FSCONFIG_SET_STRING, key.encode(), value.encode(), 0)
        for flag in _overlay_flags(view.xattrs):
            syscall("fsconfig", flag, fs, FSCONFIG_SET_FLAG, flag.encode(), None, 0)
        syscall("fsconfig", view.root, fs, FSCONFIG_CMD_CREATE, None, None, 0, release=True)
        return syscall("fsmount", view.root, fs, FSMOUNT_CLOEXEC, _WRITABLE_ATTRS)
    finally:
        os.close(fs)
        if tree >= 0:
            os.close(tree)


def covered_by(path: str, parents: tuple[str, ...] | list[str]) -> str | None:
    """The first of ``parents`` that is ``path`` or one of its ancestors."""
    for parent in parents:
        if path == parent or path.startswith(parent.rstrip("/") + "/"):
            return parent
    return None


def outermost(paths: tuple[str, ...] | list[str]) -> list[str]:
    """``paths`` normalised, without those inside another one (order kept)."""
    normal = [os.path.normpath(p) for p in paths if p]
    kept: list[str] = []
    for path in sorted(set(normal), key=len):
        if covered_by(path, kept) is None:
            kept.append(path)
    return kept


#: Errors of a mask's mount that may only mean its path is no directory
#: this namespace reaches (missing, a file, behind a symlink loop or a
#: closed directory): then it gets no tmpfs, as ``stat`` would have said.
_NOT_A_DIRECTORY = frozenset(
    (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ELOOP, errno.ENAMETOOLONG)
)


#: What a hidden path is, as ``_mask`` found it: a directory (masked with
#: an empty tmpfs), a regular file or a socket (to show ``/dev/null``), or
#: neither (missing, a FIFO, a device: left as it is).
MaskKind = Literal["directory", "file", "none"]


def _mask(where: str, path: str, flags: int) -> MaskKind:
    """Cover the hidden ``path`` (looked up as ``where``, symlinks followed)
    with an empty tmpfs of ``flags`` if it is a directory, and say what it
    is. The mount's own lookup is the first test: a directory or a missing
    path (ENOENT, a dangling symlink too) costs that one call, and ``stat``
    runs only after another refusal, to tell a file from a mount that
    failed. Raises ``OSError`` naming ``path`` when a directory could not be
    masked."""
    if "\0" in where:
        return "none"  # no such path (``stat`` refuses it; ctypes would cut it)
    options = _MASK_OPTIONS.encode()
    if held().mount(b"tmpfs", where.encode(), b"tmpfs", ctypes.c_ulong(flags), options) == 0:
        return "directory"
    code = ctypes.get_errno()
    if code == errno.ENOENT:
        return "none"
    if code in _NOT_A_DIRECTORY:
        try:
            mode = os.stat(where).st_mode
        except (OSError, ValueError):
            return "none"
        if not stat.S_ISDIR(mode):
            return "file" if stat.S_ISREG(mode) or stat.S_ISSOCK(mode) else "none"
    raise OSError(code, f"mount tmpfs on {path}: {os.strerror(code)}")


def _with_ancestors(paths: list[str]) -> set[str]:
    """``paths`` (absolute, normalised) and every directory above them, so
    that a mask holding one of them is found with one look-up."""
    found = {"/"}
    for path in paths:
        while path not in found:
            found.add(path)
            path = os.path.dirname(path)
    return found


def _is_directory(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _is_file(path: str) -> bool:
    """Whether a hidden path that is no directory is a regular file or a
    socket (symlinks followed), which gets ``/dev/null`` in its place; a
    FIFO, a device or a missing path gets nothing."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(mode) or stat.S_ISSOCK(mode)


def _shown_clones(shown: tuple[str, ...]) -> list[tuple[int, str, bool]]:
    """Read-only detached copies of the paths in ``shown`` that exist:
    (descriptor, path, whether a directory). The GIL is dropped for their
    lookups (configured paths). Raises ``OSError`` but for a missing path;
    the caller closes the descriptors."""
    clones: list[tuple[int, str, bool]] = []
    try:
        for path in shown:
            try:
                directory = stat.S_ISDIR(os.stat(path).st_mode)
            except (OSError, ValueError):
                continue
            fd = _clone_tree(path, release=True)
            clones.append((fd, path, directory))
            attrs = MOUNT_ATTR_RDONLY | _WRITABLE_ATTRS
            set_attributes(path, set_=attrs, recursive=True, fd=fd)
    except BaseException:
        for fd, _, _ in clones:
            os.close(fd)
        raise
    return clones


def _attach_shown(fd: int, path: str, directory: bool, tmpfs: list[str]) -> None:
    """Attach a path of ``shown`` where one of the new ``tmpfs`` (masks still
    writable, or the fresh /tmp) covers it, making its mount point there
    first (a directory, or an empty file for a file or socket); elsewhere the
    host's own path is in the view already and nothing is done."""
    if covered_by(path, tmpfs) is None:
        return
    if directory:
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    _attach(fd, path, release=True)


def _attach_at(fd: int, path: str, tmpfs: list[str], *, release: bool = False) -> None:
    """Attach the detached mount ``fd`` at ``path``, making the mount point
    first when it lies in one of the new ``tmpfs``."""
    if covered_by(path, tmpfs) is not None:
        os.makedirs(path, exist_ok=True)
    _attach(fd, path, release=release)


def _resolv_conf_clone(path: str | None) -> int | None:
    """A read-only detached copy of the file ``path`` (None: no file).
    Raises ``OSError`` when it cannot be made; the caller closes it."""
    if path is None:
        return None
    fd = _clone_tree(path, release=True)
    try:
        set_attributes(path, set_=MOUNT_ATTR_RDONLY | _WRITABLE_ATTRS, fd=fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _attach_resolv_conf(fd: int) -> None:
    """Attach ``fd`` where ``/etc/resolv.conf`` leads in the view (a
    symlink into ``/run/systemd/resolve`` is followed, so the file shown
    again there is the one covered). Nothing is done where it leads
    nowhere: the host has no resolver to replace."""
    target = os.path.realpath(_RESOLV_CONF)
    if os.path.isfile(target):
        _attach(fd, target)


def _open_writable(view: ActionView) -> dict[str, int]:
    """Each of ``view.writable`` opened with no symlink and judged
    (``_view_writable``); an ``O_PATH`` descriptor by path, for the caller
    to close. Raises ``WritableRefused`` for the first path refused."""
    protected = Protected(within=(*view.hidden_marks, *view.within), containing=view.containing)
    opened: dict[str, int] = {}
    try:
        for path in dict.fromkeys(view.writable):
            opened[path] = open_without_symlinks(path)
            judge(path, opened[path], protected)
    except BaseException:
        for fd in opened.values():
            os.close(fd)
        raise
    return opened


def _mask_target(path: str, view: ActionView, writable: list[str]) -> int | None:
    """For one of lre's hidden paths lying inside a writable path (where a
    build could have moved things): a descriptor of what ``path`` leads to
    now, checked to be what lre found there (``view.hidden_marks``), for
    the mask to go on. None for any other (masked by its path). Raises
    ``WritableRefused`` when it is gone or is something else."""
    if covered_by(path, writable) is None:
        return None
    marks = [(dev, ino) for dev, ino, where in view.hidden_marks if where == path]
    if not marks:
        return None
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        raise WritableRefused(path, "(lre's own) is gone from inside a writable path") from None
    if identity(fd) != marks[0]:
        os.close(fd)
        raise WritableRefused(
            path, "(lre's own) is no longer the one lre started with, inside a writable path"
        )
    return fd


def build_view(view: ActionView, *, host_proc_writable: bool = True) -> None:
    """Shape the calling thread's (new, unshared) mount namespace into
    ``view`` (see the module docstring). The host's ``/proc`` stays writable
    when ``host_proc_writable`` (for whoever covers it with the action's
    own; read-only otherwise). Raises ``WritableRefused`` when a writable
    path is refused or lre's directory inside one moved, ``OSError``
    otherwise."""
    if LIBC is None:
        raise OSError("mount namespaces need Linux")
    fresh = ["/tmp", "/dev/shm"]
    writable = outermost(view.writable)
    opened = _open_writable(view)
    # Detached copies first: once the masks are mounted these paths are gone.
    detached: list[tuple[int, str]] = []
    targets: list[int] = []
    try:
        own = [(overlay_mount(view), view.root), (_writable_clone(view.tmp), view.tmp)]
        detached.extend(own)
        shared = [(_writable_clone(path, fd=opened[path], release=True), path) for path in writable]
        detached.extend(shared)
        shown = _shown_clones(view.shown)
        detached.extend((fd, path) for fd, path, _ in shown)
        resolver = _resolv_conf_clone(view.resolv_conf)
        if resolver is not None:
            detached.append((resolver, _RESOLV_CONF))
        set_attributes("/", set_=MOUNT_ATTR_RDONLY, propagation=MS_PRIVATE, recursive=True)
        # The host's /proc stays writable until the action's first process
        # covers it with its own: unshare writes /proc/self/uid_map there.
        if host_proc_writable:
            set_attributes("/proc", clear=MOUNT_ATTR_RDONLY)
        mount_dev()  # before /dev/shm's tmpfs, which goes inside it
        _mount_private_tmpfs(view.tmpfs_bytes, view.layers)
        for fd, path in shared:
            if covered_by(path, fresh) is not None:  # in a tmpfs of this view only
                _attach_at(fd, path, fresh, release=True)
            else:  # on the directory judged, not on what its path leads to now
                _attach_onto(fd, opened[path], path)
        # What is still there of lre's own (a writable path may hold some of
        # it, and /tmp hides it already unless a writable path brought it back).
        # ``hidden`` is outermost already (``ViewPolicy``). A mask that will
        # hold the action's own mount points is made read-only after them.
        masks: list[str] = []
        later: list[str] = []
        inside = _with_ancestors([view.root, view.tmp, *(path for _, path, _ in shown)])
        for path in view.hidden:
            holds = (path.rstrip("/") or "/") in inside
            flags = MS_NOSUID | MS_NODEV | (0 if holds else MS_RDONLY)
            target = None
            where = path
            if covered_by(path, writable) is not None:
                # Judged only when it is there: the directory checked,
                # whatever its path holds now (``_mask_target``).
                if not (_is_directory(path) or _is_file(path)):
                    continue
                target = _mask_target(path, view, writable)
                if target is not None:
                    targets.append(target)
                    where = f"/proc/thread-self/fd/{target}"
            kind = _mask(where, path, flags)
            if kind == "directory":
                masks.append(path)
                if holds:
                    later.append(path)
            elif kind == "file":  # a token or key file: /dev/null in its place
                fd = _clone_tree("/dev/null")
                detached.append((fd, path))
                if target is None:
                    _attach(fd, path)
                else:
                    _attach_onto(fd, target, path)
        for fd, path in own:
            _attach_at(fd, path, [*masks, *fresh])
        for fd, path, directory in shown:
            _attach_shown(fd, path, directory, [*later, *fresh])
        if resolver is not None:
            _attach_resolv_conf(resolver)
        for path in later:
            set_attributes(path, set_=MOUNT_ATTR_RDONLY)
        # Every mount of the view nosuid: no set-user-ID bit nor file
        # capability is honoured in it (``_capabilities.py``).
        set_attributes("/", set_=MOUNT_ATTR_NOSUID, recursive=True)
    finally:
        for fd in (*(fd for fd, _ in detached), *targets, *opened.values()):
            os.close(fd)
