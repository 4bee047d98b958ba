"""Which view each action of a worker gets: hidden and writable paths, debugging.

``ViewPolicy`` is made by the runner when its containment can make views
(``Containment.can_view``) and the worker's ``sandbox_view`` is on. It holds
lre's directories to hide and the configured writable host paths, and per
action reads two platform properties:

- ``sandbox-writable-path``: more host directories, absolute, separated by
  ``:``, bound writable in that action's view (like Bazel's
  ``--sandbox_writable_path``);
- ``sandbox-debug``: keep the action's directory if it fails (as the
  worker's ``sandbox_debug``).

A writable path that is relative, is or lies inside one of lre's own
directories (it would expose them), or is not an existing directory is
refused with ``InvalidArgument`` naming the property (or the config field)
and the value. A writable path *containing* lre's directories is fine: they
stay hidden inside it.
"""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Mapping, Sequence

from lre.cas import BlobStore
from lre.config import LocalWorkerSpec
from lre.errors import InvalidArgument
from lre.worker._action_dirs import ROOT_MODE, ActionDirectory
from lre.worker._containment import Containment
from lre.worker._process import ProcessOutcome
from lre.worker._view import OVERLAY_OPTIONS, ActionView, OverlayXattrs, covered_by, outermost
from lre.worker._workdir import WorkDirectory

__all__ = [
    "DEBUG_PROPERTY",
    "WRITABLE_PROPERTY",
    "ViewOf",
    "ViewPolicy",
    "blocks_network",
    "refuse_unreachable",
    "truthy",
]

#: The view one action runs in (re-exported for the runner).
ViewOf = ActionView

WRITABLE_PROPERTY = "sandbox-writable-path"
DEBUG_PROPERTY = "sandbox-debug"


log = logging.getLogger(__name__)


def truthy(value: str | None) -> bool:
    """Whether a platform property's value turns it on (present, even empty,
    unless false, 0 or no)."""
    return value is not None and value.strip().lower() not in ("false", "0", "no")


def blocks_network(platform: Mapping[str, str], default: bool) -> bool:
    """Whether an action runs without network: the platform properties
    ``requires-network`` (allow) and ``block-network`` (block) win over the
    worker's ``network`` setting (``default``: True for block); a value of
    false, 0 or no is as if the property were absent."""
    if truthy(platform.get("requires-network")):
        return False
    if truthy(platform.get("block-network")):
        return True
    return default


def _allows(info: os.stat_result, owner: tuple[int, int], bits: int) -> bool:
    """Whether ``info``'s mode gives the user ``owner`` (uid, gid; no other
    groups) every permission in ``bits`` (``rwx`` as 0o4/0o2/0o1), through
    the owner, group or other class that applies to it."""
    uid, gid = owner
    shift = 6 if info.st_uid == uid else 3 if info.st_gid == gid else 0
    return info.st_mode >> shift & bits == bits


def _writable_by(path: str, owner: tuple[int, int]) -> bool:
    """Whether the user ``owner`` (uid, gid; no other groups) may create
    files in the directory ``path`` by its mode (False when unreadable)."""
    try:
        return _allows(os.stat(path), owner, 0o3)
    except OSError:
        return False


def closed_ancestor(path: str, owner: tuple[int, int]) -> str | None:
    """The outermost ancestor of ``path`` (itself excluded) that the user
    ``owner`` (uid, gid; no supplementary groups) may not traverse, or None.
    An ancestor that cannot be read counts as closed."""
    parts = os.path.abspath(path).split("/")[1:-1]
    current = ""
    for part in parts:
        current += "/" + part
        try:
            if not _allows(os.stat(current), owner, 0o1):
                return current
        except OSError:
            return current
    return None


def refuse_unreachable(path: str, owner: tuple[int, int], field: str) -> None:
    """Raise ``InvalidArgument`` naming ``field``, ``path`` and the directory
    above it that the user ``owner`` (uid, gid) may not traverse, if any: a
    writable path there would fail every action that uses it with EACCES."""
    closed = closed_ancestor(path, owner)
    if closed is not None:
        raise InvalidArgument(
            f"{field}: {path!r} lies below {closed!r}, which uid {owner[0]} (whom actions run "
            "as, action_user) may not enter; move it, open that directory to the user "
            '(chmod o+x), or set action_user: "root"'
        )


class ViewPolicy:
    """Hidden and writable paths of a worker's views (see the module docstring).

    ``xattrs`` is where the containment's overlays keep their marks
    (``Containment.overlay_xattrs``); every view and debug hint says so.
    Raises ``InvalidArgument`` naming ``sandbox_writable_paths`` when a
    configured writable path is refused.
    """

    def __init__(
        self,
        hidden: Sequence[str],
        writable: Sequence[str],
        *,
        xattrs: OverlayXattrs,
        debug: bool = False,
        owner: tuple[int, int] | None = None,
        closed: Sequence[str] = (),
        tmpfs_bytes: int = 0,
    ) -> None:
        #: Size of each view's /tmp and /dev/shm together (0: the view's default).
        self.tmpfs_bytes = tmpfs_bytes
        #: (uid, gid) of the user actions run as (None: lre's own): the
        #: upper layer, so the input root the action sees, belongs to it.
        self.owner = owner
        #: The user namespace (descriptor) each view shows its inputs through
        #: (``_idmap.InputIdmap``; None: they show as lre's). Set by the runner.
        self.idmap: int | None = None
        #: Directories covered because ``owner`` may not enter them (part of
        #: ``hidden``; a writable path below one is refused as unreachable).
        self.closed = tuple(closed)
        hidden = (*hidden, *closed)
        self.hidden = tuple(outermost([os.path.abspath(p) for p in hidden if p]))
        self.debug = debug
        self.xattrs: OverlayXattrs = xattrs
        self.writable = self._checked(writable, "sandbox_writable_paths")
        if owner is not None:
            for path in self.writable:
                if not _writable_by(path, owner):
                    log.warning(
                        "sandbox_writable_paths: %s is not writable by uid %d, whom actions "
                        "run as (action_user); they get EACCES there",
                        path,
                        owner[0],
                    )

    @classmethod
    def for_worker(
        cls,
        spec: LocalWorkerSpec,
        containment: Containment,
        workdir: WorkDirectory,
        store: BlobStore,
        hidden: Sequence[str] = (),
        *,
        owner: tuple[int, int] | None = None,
        tmpfs_bytes: int = 0,
    ) -> ViewPolicy | None:
        """The policy of a worker, or None when its views are off or its
        containment cannot make them. Always hidden besides ``hidden``: the
        root of the work directory and the store's content and temporary
        paths (when its blobs are files here: ``capabilities().local_files``)."""
        if not spec.sandbox_view or not containment.can_view:
            return None
        own = [str(workdir.path.parent)]
        files = store.capabilities().local_files
        if files is not None:
            own.extend(path for path in (files.content_path, files.temp_path) if path)
        # Masked as well: an ancestor the action's user may not traverse
        # (/root, a 0700 state directory); it could reach nothing below it,
        # and with an empty tmpfs there its own root and TMPDIR are
        # reachable by their absolute paths.
        closed = closed_ancestor(str(workdir.path), owner) if owner is not None else None
        return cls(
            (*own, *hidden),
            spec.sandbox_writable_paths,
            xattrs=containment.overlay_xattrs,
            debug=spec.sandbox_debug,
            owner=owner,
            closed=() if closed is None else (closed,),
            tmpfs_bytes=tmpfs_bytes,
        )

    def _checked(self, paths: Sequence[str], field: str) -> tuple[str, ...]:
        checked: list[str] = []
        for path in paths:
            if not path:
                continue
            if not os.path.isabs(path):
                raise InvalidArgument(f"{field}: {path!r} is not an absolute path")
            normal = os.path.normpath(path)
            inside = covered_by(normal, self.hidden)
            if inside is not None and covered_by(inside, self.closed) is not None:
                uid = self.owner[0] if self.owner is not None else os.geteuid()
                raise InvalidArgument(
                    f"{field}: {path!r} lies below {inside!r}, which uid {uid} (whom actions "
                    "run as, action_user) may not enter"
                )
            if inside is not None:
                raise InvalidArgument(
                    f"{field}: {path!r} would expose lre's own directory {inside!r} to actions"
                )
            if not os.path.isdir(normal):
                raise InvalidArgument(f"{field}: {path!r} is not an existing directory")
            if self.owner is not None:
                refuse_unreachable(normal, self.owner, field)
            checked.append(normal)
        return tuple(checked)

    def writable_for(self, platform: Mapping[str, str]) -> tuple[str, ...]:
        """The writable paths of an action with these platform properties."""
        extra = platform.get(WRITABLE_PROPERTY, "")
        if not extra.strip():
            return self.writable
        more = self._checked(extra.split(":"), f"Platform property {WRITABLE_PROPERTY}")
        return (*self.writable, *more)

    def view_for(self, platform: Mapping[str, str], directory: ActionDirectory) -> ActionView:
        """The view of an action in ``directory``; makes the overlay's layers
        when missing (not looked for in a directory recycling says has them,
        ``ActionDirectory.layers``; raises ``OSError`` when they cannot be made)."""
        writable = self.writable_for(platform)
        # The upper layer's own mode is the one the action sees on its input
        # root: 0700 would shut out any user the action switches to.
        layers = (
            ()
            if directory.layers
            else (
                (directory.upper, ROOT_MODE),
                (directory.overlay_work, 0o700),
            )
        )
        for path, mode in layers:
            if not path.is_dir():
                path.mkdir(mode=0o700, parents=True)
                os.chmod(path, mode)  # the umask may have dropped bits
                if path == directory.upper and self.owner is not None:
                    os.chown(path, *self.owner)
        return ActionView(
            root=str(directory.root),
            upper=str(directory.upper),
            work=str(directory.overlay_work),
            tmp=str(directory.tmp),
            hidden=self.hidden,
            writable=writable,
            xattrs=self.xattrs,
            idmap=self.idmap,
            tmpfs_bytes=self.tmpfs_bytes,
        )

    def keeps(self, platform: Mapping[str, str], process: ProcessOutcome) -> bool:
        """Whether a finished action's directory is kept for debugging: it
        failed (non-zero exit, signal, timeout) and debugging is on for it."""
        failed = process.exit_code != 0 or process.signal is not None or process.timed_out
        wanted = self.debug or truthy(platform.get(DEBUG_PROPERTY))
        return failed and wanted

    def log_kept(
        self, worker: str, operation: str, directory: ActionDirectory, process: ProcessOutcome
    ) -> None:
        """Say where a kept directory is and how to look at it."""
        log.warning(
            "worker %s: action %s %s; kept its directory %s for debugging (inputs in root/, "
            "what it wrote in view/upper/, its TMPDIR in tmp/); to see its view again: %s",
            worker,
            operation,
            process.describe,
            directory.path,
            self.enter_hint(directory),
        )

    def enter_hint(self, directory: ActionDirectory) -> str:
        """A shell command that shows a kept directory as its action saw it:
        the overlay mounted again with the action's options. Marks in
        ``user.overlay.*`` need ``userxattr`` (without it the overlay would
        ignore the opaque directories and show removed inputs again), and
        then a user namespace, which lets lre's own user run it (root there
        may also clear the work directory overlayfs left at mode 0)."""
        quoted = shlex.quote(str(directory.path))
        options = "".join(f",{key}={value}" for key, value in OVERLAY_OPTIONS)
        unshare = "unshare --mount"
        if self.xattrs == "user":
            options += ",userxattr"
            unshare = "unshare --user --map-root-user --mount"
        return (
            f"cd {quoted} && {unshare} sh -c 'rm -rf view/work/work/incompat && "
            "mount -t overlay overlay -o "
            f"lowerdir=root,upperdir=view/upper,workdir=view/work{options} root && "
            "cd root && exec sh'"
        )
