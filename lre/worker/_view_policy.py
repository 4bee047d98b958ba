"""Which view each action of a worker gets: hidden and writable paths, debugging.

``ViewPolicy`` is made by the runner when its containment can make views
(``Containment.can_view``) and the worker's ``sandbox_view`` is on. It holds
lre's directories to hide and the configured writable host paths
(``sandbox_writable_paths``, the only source of writable host paths), and
per action reads two platform properties:

- ``sandbox-writable-path``: absolute paths separated by ``:`` (like Bazel's
  ``--sandbox_writable_path``), each of which must be at or below one of the
  configured writable paths (which every view shows writable already: the
  property narrows nothing and widens nothing, it is checked and accepted);
- ``sandbox-debug``: keep the action's directory if it fails (as the
  worker's ``sandbox_debug``).

A writable path that is relative, is or lies inside one of lre's own
directories (it would expose them) or inside a socket mask, is not an
existing directory, or (from the property) is not below a configured one is
refused with ``InvalidArgument`` naming the property (or the config field)
and the value. Beyond these checks of the name, every writable path is
opened with no symlink and judged by device and inode against lre's
directories, lre's installation and the user's home (``_view_writable``): at
start-up here for the configured list, and for every view where it is built
and mounted (``_view.build_view``), whose refusal ``refused`` turns into the
same ``InvalidArgument``. A writable path *containing* lre's directories is
fine: they stay hidden inside it.

Every view also hides the host's sockets that run commands for whoever
connects (``_socket_masks``), but for the worker's
``sandbox_visible_sockets``: each must be absolute and neither be, lie in
nor hold one of lre's own directories (else ``InvalidArgument`` naming the
field), and is shown at its
own path, read-only, in every view where it exists when the view is built.
"""

from __future__ import annotations

import logging
import os
import pwd
import shlex
import site
import subprocess
import sys
from collections.abc import Mapping, Sequence

from lre.cas import BlobStore
from lre.config import LocalWorkerSpec
from lre.errors import InvalidArgument
from lre.worker.containment import (
    Containment,
    close_layers,
    layers_here,
    write_actions_resolv_conf,
)
from lre.worker.directories import ActionDirectory, ActionLayers, WorkDirectory
from lre.worker.process import ProcessOutcome
from lre.worker.view import (
    OVERLAY_OPTIONS,
    SHOWN_INSIDE,
    ActionView,
    Mark,
    OverlayXattrs,
    Protected,
    WritableRefused,
    covered_by,
    judge,
    mark_of,
    marks_above,
    open_without_symlinks,
    outermost,
    socket_masks,
)

__all__ = [
    "DEBUG_PROPERTY",
    "WRITABLE_PROPERTY",
    "ViewOf",
    "ViewPolicy",
    "blocks_network",
    "judge_writable",
    "refuse_unreachable",
    "refuse_unsafe_writable",
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


def installation() -> list[str]:
    """The directories of lre's installation an action may never write:
    the Python running it (``sys.prefix`` and ``sys.base_prefix``, with
    their exec variants), its site-packages, the user's own site-packages
    and the ``lre`` package itself (a checkout, for an editable install)."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    paths += site.getsitepackages()
    if site.ENABLE_USER_SITE:
        paths.append(site.getusersitepackages())
    paths.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    absolute = (os.path.abspath(p) for p in paths if p)
    return list(dict.fromkeys(p for p in absolute if p != "/"))


def homes() -> list[str]:
    """The home of lre's user: its password entry's and ``$HOME``; ``/``
    (the home of some service users) is none, or every path would lie in it."""
    found = [os.environ.get("HOME", "")]
    try:
        found.append(pwd.getpwuid(os.geteuid()).pw_dir)
    except KeyError:
        pass
    absolute = (os.path.abspath(p) for p in found if p and os.path.isabs(p))
    return list(dict.fromkeys(p for p in absolute if p != "/"))


def protected_marks(directories: Sequence[str]) -> tuple[tuple[Mark, ...], tuple[Mark, ...]]:
    """The marks (``Protected.within``, ``Protected.containing``) of
    ``directories`` that exist: no writable path may be one of them, lie
    inside one, or hold one."""
    within: dict[tuple[int, int], Mark] = {}
    containing: dict[tuple[int, int], Mark] = {}
    for directory in directories:
        mark = mark_of(directory)
        if mark is not None:
            within.setdefault(mark[:2], mark)
        for above in marks_above(directory):
            containing.setdefault(above[:2], above)
    return tuple(within.values()), tuple(containing.values())


def judge_writable(path: str, protected: Protected, field: str) -> None:
    """Open the writable ``path`` (absolute, normalised) with no symlink and
    judge it now (``_view_writable``); raises ``InvalidArgument`` naming
    ``field`` and the path when it is refused or cannot be opened."""
    try:
        fd = open_without_symlinks(path)
    except WritableRefused as refusal:
        raise InvalidArgument(f"{field}: {refusal}") from None
    except OSError as error:
        raise InvalidArgument(f"{field}: {path!r} cannot be opened: {error}") from None
    try:
        judge(path, fd, protected)
    except WritableRefused as refusal:
        raise InvalidArgument(f"{field}: {refusal}") from None
    finally:
        os.close(fd)


def refuse_unsafe_writable(paths: Sequence[str], hidden: Sequence[str], field: str) -> None:
    """The start-up check of configured writable ``paths``: raise
    ``InvalidArgument`` naming ``field`` and the first one that is not
    absolute, has a symlink in it, or is refused against lre's directories
    (``hidden``, those that exist yet), lre's installation and the home."""
    within, containing = protected_marks([*installation(), *homes()])
    own = [mark for mark in (mark_of(p) for p in hidden if p) if mark is not None]
    protected = Protected(within=(*own, *within), containing=containing)
    for path in paths:
        if not path:
            continue
        if not os.path.isabs(path):
            raise InvalidArgument(f"{field}: {path!r} is not an absolute path")
        judge_writable(os.path.normpath(path), protected, field)


def _resolv_conf_for(containment: Containment, workdir: WorkDirectory) -> str | None:
    """The resolv.conf a worker's views show (written into its work
    directory), or None when they show the host's: actions without a DNS
    forwarder in their network, or a host naming a nameserver they reach."""
    forwarder = containment.dns_forwarder()
    if forwarder is None:
        return None
    try:
        return write_actions_resolv_conf(workdir.path, forwarder=forwarder)
    except OSError as error:
        log.warning("actions read the host's resolv.conf: cannot write their own (%s)", error)
        return None


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
        sockets: Sequence[str] = (),
        visible: Sequence[str] = (),
        tmpfs_bytes: int = 0,
        resolv_conf: str | None = None,
    ) -> None:
        #: Size of each view's /tmp and /dev/shm together (0: the view's default).
        self.tmpfs_bytes = tmpfs_bytes
        #: The file each view shows at /etc/resolv.conf (``_action_dns``;
        #: None: the host's).
        self.resolv_conf = resolv_conf
        #: (uid, gid) of the user actions run as (None: lre's own): the
        #: upper layer, so the input root the action sees, belongs to it.
        self.owner = owner
        #: The user namespace (descriptor) each view shows its inputs through
        #: (``_idmap.InputIdmap``; None: they show as lre's). Set by the runner.
        self.idmap: int | None = None
        #: Who makes each action's tmpfs (``make_layers``): the backend, in
        #: lre's process or its view helper (None: lre's process).
        self.containment: Containment | None = None
        #: Directories covered because ``owner`` may not enter them (part of
        #: ``hidden``; a writable path below one is refused as unreachable).
        self.closed = tuple(closed)
        hidden = (*hidden, *closed)
        self.hidden = tuple(outermost([os.path.abspath(p) for p in hidden if p]))
        self.debug = debug
        self.xattrs: OverlayXattrs = xattrs
        #: Host sockets handed in (``sandbox_visible_sockets``), resolved.
        self.visible = self._visible(visible)
        #: Socket masks (``_socket_masks``) but the paths handed in.
        self.sockets = tuple(p for p in outermost(list(sockets)) if p not in self.visible)
        #: Everything a view covers: lre's directories and the socket masks.
        self.masks = tuple(outermost([*self.hidden, *self.sockets]))
        #: lre's installation and the user's home, as ``Protected`` marks.
        self.within, self.containing = protected_marks([*installation(), *homes()])
        #: The marks of ``hidden`` by path (refreshed while some are missing).
        self._hidden_marks: dict[str, Mark] = {}
        self._marks_of_hidden()
        self.writable = self._checked(writable, "sandbox_writable_paths")
        for path in self.writable:
            judge_writable(path, self._protected(), "sandbox_writable_paths")
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
        uids = {os.geteuid(), *(() if owner is None else (owner[0],))}
        policy = cls(
            (*own, *hidden),
            spec.sandbox_writable_paths,
            xattrs=containment.overlay_xattrs,
            debug=spec.sandbox_debug,
            owner=owner,
            closed=() if closed is None else (closed,),
            sockets=socket_masks(os.environ, sorted(uids)),
            visible=spec.sandbox_visible_sockets,
            tmpfs_bytes=tmpfs_bytes,
            resolv_conf=_resolv_conf_for(containment, workdir),
        )
        policy.containment = containment
        return policy

    def make_layers(self, count: int) -> list[ActionLayers]:
        """``count`` fresh tmpfs of ``tmpfs_bytes`` for actions' views (the
        ``LayerSource`` of the worker's action directories), their upper
        layers given to ``owner`` when named. Raises ``OSError`` (none left
        open)."""
        containment = self.containment
        if containment is None:
            made = layers_here(count, self.tmpfs_bytes)
        else:
            made = containment.make_layers(count, self.tmpfs_bytes)
        try:
            if self.owner is not None:
                for fd, _ in made:
                    os.chown("upper", *self.owner, dir_fd=fd, follow_symlinks=False)
        except BaseException:
            self._drop(made)
            raise
        return [ActionLayers(fd, theirs) for fd, theirs in made]

    def drop_layers(self, layers: list[ActionLayers]) -> None:
        """Close ``layers`` (logged, never raises): each tmpfs is freed with
        the last view holding it."""
        self._drop([(layer.fd, layer.builder_fd) for layer in layers])

    def _drop(self, made: list[tuple[int, int]]) -> None:
        if self.containment is None:
            close_layers(made)
        else:
            self.containment.drop_layers(made)

    def _visible(self, paths: Sequence[str]) -> tuple[str, ...]:
        """``sandbox_visible_sockets`` checked and resolved (symlinks
        followed where the path exists: a mask is a resolved path too); one
        not there now only gets a warning (an agent may start later)."""
        field = "sandbox_visible_sockets"
        checked: list[str] = []
        for path in _absolute(paths, field):
            resolved = os.path.realpath(path)
            # At, inside or around one of lre's directories: a bind of it
            # (made before the masks) would show that directory again.
            inside = covered_by(resolved, self.hidden) or next(
                (h for h in self.hidden if covered_by(h, [resolved])), None
            )
            if inside is not None:
                raise InvalidArgument(
                    f"{field}: {path!r} would expose lre's own directory {inside!r} to actions"
                )
            if not os.path.exists(resolved):
                log.warning("%s: %s does not exist now; views show it once it does", field, path)
            checked.append(resolved)
        return tuple(checked)

    def _checked(self, paths: Sequence[str], field: str) -> tuple[str, ...]:
        checked: list[str] = []
        for path in _absolute(paths, field):
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
            masked = covered_by(normal, self.sockets)
            if masked is not None:
                raise InvalidArgument(
                    f"{field}: {path!r} lies in {masked!r}, which views hide: sockets there "
                    "run commands for whoever connects (docs/security.md)"
                )
            if not os.path.isdir(normal):
                raise InvalidArgument(f"{field}: {path!r} is not an existing directory")
            if self.owner is not None:
                refuse_unreachable(normal, self.owner, field)
            checked.append(normal)
        return tuple(checked)

    def _marks_of_hidden(self) -> tuple[Mark, ...]:
        """The marks of lre's hidden paths; looks again for those missing."""
        if len(self._hidden_marks) < len(self.hidden):
            for path in self.hidden:
                if path not in self._hidden_marks:
                    mark = mark_of(path)
                    if mark is not None:
                        self._hidden_marks[path] = mark
        return tuple(self._hidden_marks.values())

    def _protected(self) -> Protected:
        return Protected(
            within=(*self._marks_of_hidden(), *self.within), containing=self.containing
        )

    def writable_for(self, platform: Mapping[str, str]) -> tuple[str, ...]:
        """The writable paths of an action with these platform properties:
        the configured ones, and those the property names, each of which
        must be at or below a configured one (else ``InvalidArgument``
        naming the property and the path)."""
        extra = platform.get(WRITABLE_PROPERTY, "")
        if not extra.strip():
            return self.writable
        field = f"Platform property {WRITABLE_PROPERTY}"
        more = self._checked(extra.split(":"), field)
        for path in more:
            if covered_by(path, self.writable) is None:
                allowed = ", ".join(repr(p) for p in self.writable) or "none"
                raise InvalidArgument(
                    f"{field}: {path!r} is not at or below one of the worker's "
                    f"sandbox_writable_paths (configured: {allowed}); only lre's configuration "
                    "makes host paths writable"
                )
        return (*self.writable, *more)

    def refused(self, platform: Mapping[str, str], refusal: WritableRefused) -> InvalidArgument:
        """The error of an action whose view refused a writable path (found
        where the view was built), naming the property when the path came
        from it, else the configuration field."""
        named = platform.get(WRITABLE_PROPERTY, "").split(":")
        came = {os.path.normpath(p) for p in named if p.strip() and os.path.isabs(p)}
        field = (
            f"Platform property {WRITABLE_PROPERTY}"
            if refusal.path in came
            else "sandbox_writable_paths"
        )
        return InvalidArgument(f"{field}: {refusal}")

    def view_for(self, platform: Mapping[str, str], directory: ActionDirectory) -> ActionView:
        """The view of an action in ``directory``, whose root is staged: its
        overlay's layers on the directory's own tmpfs (``layers``, named
        through the view builder's descriptor). Raises ``OSError`` when the
        directory has none."""
        writable = self.writable_for(platform)
        layers = directory.layers
        if layers is None:
            raise OSError(f"action directory {directory.path} has no tmpfs for its view")
        builder = f"/proc/self/fd/{layers.builder_fd}"
        return ActionView(
            root=str(directory.root),
            upper=f"{builder}/upper",
            work=f"{builder}/work",
            layers=layers.builder_fd,
            tmp=str(directory.tmp),
            hidden=self.masks,
            writable=writable,
            shown=(*SHOWN_INSIDE, *self.visible),
            # Needed only to judge writable paths and mask inside them.
            hidden_marks=self._marks_of_hidden() if writable else (),
            within=self.within if writable else (),
            containing=self.containing if writable else (),
            xattrs=self.xattrs,
            idmap=self.idmap,
            tmpfs_bytes=self.tmpfs_bytes,
            resolv_conf=self.resolv_conf,
        )

    def keeps(self, platform: Mapping[str, str], process: ProcessOutcome) -> bool:
        """Whether a finished action's directory is kept for debugging: it
        failed (non-zero exit, signal, timeout) and debugging is on for it."""
        failed = process.exit_code != 0 or process.signal is not None or process.timed_out
        wanted = self.debug or truthy(platform.get(DEBUG_PROPERTY))
        return failed and wanted

    def keep_upper(self, directory: ActionDirectory) -> None:
        """(thread) Copy what the action of a directory kept for debugging
        wrote (its tmpfs's upper layer, dropped with the directory's
        layers) to ``view/upper`` beside an empty ``view/work``, for
        ``enter_hint``. A copy that fails in part (an unprivileged lre
        cannot make the overlay's whiteouts) is logged, what could be copied
        is kept."""
        layers = directory.layers
        if layers is None:
            return
        view = directory.kept.parent
        try:
            view.mkdir(mode=0o700)
            (view / "work").mkdir(mode=0o700)
            # Through lre's pid: ``cp`` cannot see lre's descriptors as its own.
            source = f"/proc/{os.getpid()}/fd/{layers.fd}/upper"
            copied = subprocess.run(
                ["cp", "-a", "--", source, str(directory.kept)],
                capture_output=True,
                text=True,
                check=False,
            )
        except OSError as error:
            log.warning("kept directory %s: its upper layer was not copied (%s)", view, error)
            return
        if copied.returncode != 0:
            log.warning(
                "kept directory %s: its upper layer was copied in part (%s)",
                view,
                copied.stderr.strip()[-300:],
            )

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


def _absolute(paths: Sequence[str], field: str) -> list[str]:
    """The non-empty ``paths``; ``InvalidArgument`` naming ``field`` when one is relative."""
    relative = next((path for path in paths if path and not os.path.isabs(path)), None)
    if relative is not None:
        raise InvalidArgument(f"{field}: {relative!r} is not an absolute path")
    return [path for path in paths if path]
