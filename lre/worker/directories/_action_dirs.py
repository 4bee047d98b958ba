"""Action directories of one worker: made ahead of time, recycled, removed in batches.

Creating and removing files and directories writes the filesystem journal
and allocates inodes (ext4 scans its bitmaps for each new one); on a busy
disk one ``mkdir`` or ``rmdir`` can take milliseconds, which on the event
loop would stall every other action, while a thread round trip per action
costs more CPU than the calls themselves. ``ActionDirectories`` therefore:

- ``take()`` hands out an empty action directory (``{work}/a{n}/`` holding an
  empty ``root/`` and ``tmp/``, maybe empty ``stdout``/``stderr`` files) from a stock made
  in advance; when the stock is empty it makes one in a thread;
- ``release(path)`` queues a finished action's directory; the runner
  releases it only once nothing the action started can still run (the
  containment backend says so; otherwise with ``reusable=False``, and it is
  removed rather than recycled);
- ``run()`` (started by the worker with ``nursery.start``) handles every
  queued directory and refills the stock in one thread call per batch. A
  directory that holds nothing but its ``root/`` (mode 0755) and the log
  files (plain files with a single link, so never a file a store adopted by
  hardlink) and its private ``tmp/`` (mode 0700) is *recycled*: the logs are
  truncated, ``tmp/`` is emptied, everything under
  ``root/`` but its directories is unlinked (``scrub_root``), and it goes
  back into the stock with those directories listed in ``existing``, for
  the next action's staging to reuse. A directory whose action ran in a
  view also has its overlay's upper layer scrubbed the same way (its files
  unlinked, the directories the overlay copied up kept, listed in
  ``upper_dirs``: made again by the next overlay's copy-up otherwise; see
  ``fit_upper``) and the overlay's own
  ``view/work/work`` removed; the view's mount namespace, when the runner
  held it past the action's end (``release(view=...)``), is closed first,
  in the same thread (that close unmounts the view and waits for an RCU
  grace period, which the action's exit would otherwise have waited for).
  An action that leaves nothing behind costs no new inode at all, and one
  whose tree looks like the previous one's costs only the directories that
  differ (``take`` hands out the most recently recycled directory, whose
  skeleton is the likeliest to match). Up to twice the stock is
  kept this way, so that a burst larger than the stock comes back as ready
  directories instead of being removed now and made again at the next
  burst, and ``take()`` on an empty stock waits for a batch that is
  recycling rather than making a new one. Anything else is removed.
  When ``run`` stops (worker shutdown) it removes the queue and the stock,
  shielded.

Without ``run`` (a runner used on its own, in tests) or after it stopped,
``release`` removes the directory in a thread before returning. Before a
released directory is recycled or removed, mounts an action left below it are
detached (lre's mount table is re-read only when it changed); one that cannot
be removed is moved into the worker's quarantine (``_quarantine.py``), whose
entries ``run`` retries every ``RETRY_S`` seconds.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import trio

from lre.worker.directories._quarantine import RETRY_S
from lre.worker.directories._removal import remove_tree
from lre.worker.directories._skeleton import scrub_root
from lre.worker.directories._workdir import WorkDirectory

log = logging.getLogger(__name__)

#: Name of the input root inside an action directory.
ROOT_NAME = "root"
#: Mode of the input root, and of the overlay's upper layer, whose own mode
#: is the mode the action sees on its input root (a user the action switches
#: to must be able to enter it, as in Bazel's sandboxes; the action directory
#: around it is 0700, so no other user of the host can).
ROOT_MODE = 0o755
#: Names of the action's stdout and stderr files inside an action directory.
LOG_NAMES = ("stdout", "stderr")
#: Name of the action's private temporary directory (its TMPDIR).
TMP_NAME = "tmp"
#: Name of the directory holding the overlay layers of an action's view
#: (``view/upper``: what the action wrote; ``view/work``: the overlay's own).
VIEW_NAME = "view"
_RECYCLABLE = frozenset((ROOT_NAME, TMP_NAME, VIEW_NAME, *LOG_NAMES))
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class ActionDirectory:
    """One action directory and the paths the runner uses inside it
    (computed once per directory, which is recycled many times)."""

    path: Path
    root: Path
    stdout: Path
    stderr: Path
    #: The action's private temporary directory (outside its input root).
    tmp: Path
    #: The overlay's upper layer and work directory (made on first use).
    upper: Path
    overlay_work: Path
    #: Empty directories already under ``root`` (relative paths), left by
    #: the previous action; ``stage_inputs`` reuses or removes them.
    existing: frozenset[str] = frozenset()
    #: The overlay's ``upper`` and ``work`` exist, as recycling left them
    #: (emptied, ``ROOT_MODE`` and 0700): a view need not look for them.
    layers: bool = False
    #: Empty directories kept in the upper layer (relative paths, parents
    #: first or not), as the previous action's overlay copied them up;
    #: ``fit_upper`` removes those the next staged root has no directory for.
    upper_dirs: frozenset[str] = frozenset()

    @classmethod
    def at(cls, path: Path) -> ActionDirectory:
        view = path / VIEW_NAME
        return cls(
            path,
            path / ROOT_NAME,
            path / LOG_NAMES[0],
            path / LOG_NAMES[1],
            path / TMP_NAME,
            view / "upper",
            view / "work",
        )


class ActionDirectories:
    """Ready-made action directories and deferred removal for one worker.

    ``stock``: how many empty directories to keep ready (the worker's
    concurrency is a good value; at least 1). ``owner`` (uid, gid): the user
    actions run as (``_identity.py``; None: lre's own), given each
    directory's ``tmp/`` and accepted as the owner of what is recycled.
    ``overlay_xattrs``: the xattr namespace the views' overlays keep their
    marks in (``trusted`` or ``user``, ``Containment.overlay_xattrs``); an
    upper directory carrying any other xattr is not kept.
    """

    def __init__(
        self,
        workdir: WorkDirectory,
        *,
        stock: int,
        owner: tuple[int, int] | None = None,
        overlay_xattrs: str = "trusted",
    ) -> None:
        self.workdir = workdir
        self.owner = owner
        self._marks = overlay_marks(overlay_xattrs)
        self.stock_size = max(1, stock)
        self._numbers = itertools.count(1)
        self._stock: list[ActionDirectory] = []
        self._trash: list[ActionDirectory] = []
        #: released directories that must be removed, not recycled
        self._doomed: list[ActionDirectory] = []
        #: held mount namespaces of released directories' views, closed
        #: (torn down) at the start of the next batch
        self._views: list[int] = []
        self._wake = trio.Event()
        self._refilled = trio.Event()
        self._in_batch = False
        self._running = False
        self._batches = 0
        self._recycled = 0

    @property
    def ready(self) -> int:
        """Directories in stock now."""
        return len(self._stock)

    @property
    def pending_removal(self) -> int:
        """Released directories not removed yet."""
        return len(self._trash)

    @property
    def idle(self) -> bool:
        """Nothing released is waiting to be recycled or removed, and no
        batch is running: the directories on disk are the stock plus those
        in use."""
        return not (self._trash or self._doomed or self._in_batch)

    @property
    def kept_at_most(self) -> int:
        """The most ready directories kept when idle (twice the stock)."""
        return 2 * self.stock_size

    @property
    def recycled(self) -> int:
        """Directories put back into the stock instead of being remade."""
        return self._recycled

    @property
    def batches(self) -> int:
        """Thread calls made by ``run`` so far (for tests and statistics)."""
        return self._batches

    async def take(self) -> ActionDirectory:
        """An empty action directory with an empty ``root/`` inside: the most
        recently recycled one (its skeleton is the likeliest to match the
        next tree: consecutive actions of a build stage look alike).

        When the stock is empty while released directories are waiting to
        be recycled (or a batch is recycling them), this waits for that batch
        rather than making a new directory: a new one has none of the
        directories the next staging could reuse, and would later be one too
        many and be removed. Raises ``OSError`` when one cannot be made (disk
        full, permissions).
        """
        while not self._stock and self._running and (self._trash or self._in_batch):
            self._wake.set()
            await self._refilled.wait()
        if self._stock:
            path = self._stock.pop()
            if len(self._stock) < self.stock_size // 2:
                self._wake.set()
            return path
        self._wake.set()
        return await trio.to_thread.run_sync(self._make)

    async def release(
        self,
        directory: ActionDirectory,
        *,
        reusable: bool = True,
        view: int | None = None,
    ) -> None:
        """Give back a finished action's directory (see the module docstring).

        ``reusable`` False (a process of the action may still write into it)
        has it removed, never handed to another action. ``view`` is a
        descriptor holding the mount namespace the action's view was (its
        overlay still mounted over this directory's layers): it is closed,
        tearing the view down, in the batch thread before the directory is
        recycled or removed (a failing close is logged).
        """
        views = [] if view is None else [view]
        if self._running:
            self._views.extend(views)
            if reusable:
                self._trash.append(directory)
            else:
                self._doomed.append(directory)
            self._wake.set()
            return
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._remove_all, [directory], views)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Remove released directories and refill the stock until cancelled."""
        self._running = True
        self._wake.set()  # make the stock
        task_status.started()
        try:
            while True:
                with trio.move_on_after(RETRY_S) as idle:
                    await self._wake.wait()
                if idle.cancelled_caught:
                    await self._retry_quarantine()
                    continue
                self._wake = trio.Event()
                trash, self._trash = self._trash, []
                doomed, self._doomed = self._doomed, []
                views, self._views = self._views, []
                wanted = self.stock_size - len(self._stock)
                keep = 2 * self.stock_size - len(self._stock)
                self._batches += 1
                self._in_batch = True
                # Shielded: a cancellation arriving during the thread call would
                # otherwise drop the directories it made, leaving them on disk.
                with trio.CancelScope(shield=True):
                    made = await trio.to_thread.run_sync(
                        self._batch, trash, wanted, keep, doomed, views
                    )
                self._stock.extend(made)  # takes meanwhile only shrank the stock
                self._in_batch = False
                self._refilled.set()
                self._refilled = trio.Event()
        finally:
            self._running = False
            self._in_batch = False
            self._refilled.set()  # takers waiting for a batch make their own
            trash = self._trash + self._doomed + self._stock
            views = self._views
            self._trash, self._doomed, self._stock, self._views = [], [], [], []
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._remove_all, trash, views)

    async def _retry_quarantine(self) -> None:
        quarantine = self.workdir.quarantine
        if not quarantine.path.exists():
            return
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(quarantine.retry)

    # ------------------------------------------------------------------ in threads

    def _make(self) -> ActionDirectory:
        name = f"a{next(self._numbers)}"
        while name in self.workdir.stuck:
            name = f"a{next(self._numbers)}"
        directory = ActionDirectory.at(self.workdir.new_action_dir(name))
        os.mkdir(directory.root, ROOT_MODE)
        os.mkdir(directory.tmp, 0o700)
        if self.owner is not None:
            os.chown(directory.tmp, *self.owner)
        return directory

    def _batch(
        self,
        trash: list[ActionDirectory],
        wanted: int,
        keep: int,
        doomed: list[ActionDirectory] = [],  # noqa: B006 - never mutated
        views: list[int] = [],  # noqa: B006 - never mutated
    ) -> list[ActionDirectory]:
        """Close the held ``views`` (their overlays are over these directories'
        layers), recycle up to ``keep`` of ``trash`` and remove the rest, then
        make new directories until there are ``wanted``. (Recycling more than
        the stock needs is cheaper than removing a directory now and making
        one at the next burst.)"""
        _close_views(views)
        ready: list[ActionDirectory] = []
        removing: list[ActionDirectory] = []
        mounts = self.workdir.mounts
        for directory in (*trash, *doomed):
            if mounts.below(directory.path):  # cheap while the mount table is unchanged
                mounts.detach_below(directory.path)
        for directory in trash:
            recycled = _recycle(directory, self._owners, self._marks) if len(ready) < keep else None
            if recycled is not None:
                ready.append(recycled)
            else:
                removing.append(directory)
        self._recycled += len(ready)
        self._remove_all(doomed)
        self._remove_all(removing)
        try:
            while len(ready) < wanted:
                ready.append(self._make())
        except OSError:
            log.exception("worker directory %s: cannot make action directories", self.workdir.path)
        return ready

    @property
    def _owners(self) -> tuple[int, ...]:
        """The uids a recycled directory's ``tmp/``, upper layer and staged
        directories may belong to: lre's and the actions' user."""
        own = os.geteuid()
        return (own,) if self.owner is None else (own, self.owner[0])

    def _remove_all(
        self,
        directories: list[ActionDirectory],
        views: list[int] = [],  # noqa: B006 - never mutated
    ) -> None:
        _close_views(views)
        for directory in directories:
            try:
                self.workdir.remove_action_dir(directory.path)
            except OSError:
                log.exception("could not remove action directory %s", directory.path)


def _close_views(views: list[int]) -> None:
    """Close held view namespaces (each close unmounts that view and waits
    for an RCU grace period); a failing close is logged."""
    for fd in views:
        try:
            os.close(fd)
        except OSError:
            log.exception("could not close a held view's namespace (descriptor %d)", fd)


def overlay_marks(xattrs: str) -> frozenset[str]:
    """The xattrs an overlay keeping its marks in the ``xattrs`` namespace
    leaves on the upper directories it copied up or made (and on the upper
    layer's root): its own bookkeeping, never shown to an action (the
    overlay hides its namespace's marks), meaningless on a directory merged
    over a lower one (``index=off``: the origin is not verified)."""
    return frozenset(f"{xattrs}.overlay.{name}" for name in ("origin", "impure", "uuid"))


def _recycle(
    directory: ActionDirectory, owners: tuple[int, ...], marks: frozenset[str] = frozenset()
) -> ActionDirectory | None:
    """``directory`` made ready for another action if it holds only what an
    action directory starts with plus what ``scrub_root`` can clear (see the
    module docstring); None when it does not or a call fails (then it must be
    removed: its logs may be truncated and files under root unlinked, nothing
    else is changed). ``owners``: the uids its directories may belong to;
    ``marks``: the overlay's xattrs an upper directory kept may carry."""
    path = directory.path
    try:
        names = os.listdir(path)
        if ROOT_NAME not in names or not _RECYCLABLE.issuperset(names):
            return None
        if stat.S_IMODE(os.lstat(path).st_mode) != 0o700:
            return None
        for name in LOG_NAMES:
            if name not in names:
                continue
            log_path = path / name
            info = os.lstat(log_path)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
                return None
            if info.st_size:
                os.truncate(log_path, 0)
    except OSError:
        return None
    if not _empty_tmp(directory.tmp, owners):
        return None
    upper_dirs = _empty_view(directory, owners, marks) if VIEW_NAME in names else frozenset()
    if upper_dirs is None:
        return None
    existing = scrub_root(directory.root, owners)
    if existing is None:
        return None
    return dataclasses.replace(
        directory,
        existing=existing,
        layers=_has_layers(directory, names),
        upper_dirs=upper_dirs,
    )


def _has_layers(directory: ActionDirectory, names: list[str]) -> bool:
    """Whether both overlay layers are there after ``_empty_view`` (which
    checked the upper layer; a failed ``lstat`` counts as no)."""
    if VIEW_NAME not in names:
        return False
    try:
        return stat.S_ISDIR(os.lstat(directory.overlay_work).st_mode)
    except OSError:
        return False


def _empty_view(
    directory: ActionDirectory, owners: tuple[int, ...], marks: frozenset[str]
) -> frozenset[str] | None:
    """Empty the overlay's upper layer of all but its directories
    (``scrub_root``, directories carrying only the overlay's ``marks``;
    otherwise of everything), give it back ``ROOT_MODE`` (an action
    that chmods its input root changes the upper layer's own mode) and remove
    the overlay's own ``work/work`` from its work directory, marker of a
    volatile mount included (that marker would refuse the next mount; and an
    overlay that finds ``work/work`` empties and makes it again itself, in
    the spawner thread, where on ext4 that costs milliseconds of wall time
    per action). Returns the upper directories kept (relative paths); None
    when a call fails or the upper layer is not a directory of lre's user
    any more (the action directory is then removed whole)."""
    try:
        upper = os.lstat(directory.upper)
        if not stat.S_ISDIR(upper.st_mode) or upper.st_uid not in owners:
            return None
        if stat.S_IMODE(upper.st_mode) != ROOT_MODE:
            os.chmod(directory.upper, ROOT_MODE)
        # Kept directories show the next action the owner and group of the
        # upper layer's root, as staging's would.
        kept = scrub_root(directory.upper, owners, marks, (upper.st_uid, upper.st_gid))
        if kept is None:
            kept = frozenset()
            with os.scandir(directory.upper) as entries:
                for entry in entries:
                    remove_tree(Path(entry.path))  # never follows symlinks nor crosses mounts
        # overlayfs leaves work/work, work/work/incompat and its "volatile"
        # marker at mode 0: an lre that is not root must open each up first.
        inner = directory.overlay_work / "work"
        if _drop_overlay_work(directory.overlay_work):
            return kept
        marker = inner / "incompat" / "volatile"
        for path in (inner, marker.parent, marker):
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                break  # no overlay was mounted here, or no marker left
            if not stat.S_ISDIR(info.st_mode):
                return None
            if not info.st_mode & stat.S_IXUSR:
                os.chmod(path, 0o700)
        if os.path.lexists(inner):
            remove_tree(inner)  # opens up what lies below, never follows links
    except OSError:
        return None
    return kept


def _drop_overlay_work(work: Path) -> bool:
    """The usual case, in a few calls: ``work/work`` holding only
    ``incompat/volatile/dirty`` as overlayfs left it, removed (the general
    descriptor-based removal costs about twice as much CPU on ext4). False
    when anything else is found or a call fails (mode 0 for an lre that is
    not root, another entry): the caller then takes the general way, which
    copes with both. Opened one name at a time with ``O_NOFOLLOW``: no
    symlink is followed."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    opened: list[int] = []
    try:
        opened.append(os.open(work, flags))
        for name in ("work", "incompat", "volatile"):
            opened.append(os.open(name, flags, dir_fd=opened[-1]))
        os.unlink("dirty", dir_fd=opened[3])
        os.rmdir("volatile", dir_fd=opened[2])
        os.rmdir("incompat", dir_fd=opened[1])
        os.rmdir("work", dir_fd=opened[0])
    except OSError:
        return False
    finally:
        for fd in opened:
            os.close(fd)
    return True


def _empty_tmp(tmp: Path, owners: tuple[int, ...]) -> bool:
    """Empty the action's temporary directory (most actions leave it empty:
    one directory read); False when it is not lre's own 0700 directory any
    more or cannot be emptied (the action directory is then removed whole)."""
    try:
        info = os.lstat(tmp)
        if not stat.S_ISDIR(info.st_mode) or stat.S_IMODE(info.st_mode) != 0o700:
            return False
        if info.st_uid not in owners:
            return False
        with os.scandir(tmp) as entries:
            for entry in entries:
                remove_tree(Path(entry.path))  # never follows symlinks nor crosses mounts
    except OSError:
        return False
    return True


def fit_upper(directory: ActionDirectory) -> None:
    """Remove the directories kept in ``directory``'s upper layer
    (``upper_dirs``, all empty) that its staged root has no directory for,
    deepest first, before the next overlay is mounted over them: such a
    directory would show the action a directory it did not ask for, or hide
    the input file or symlink staged at its path. One kept where the root has
    a directory merges over it and changes nothing the action sees.

    Parents are judged before their children, from the root's descriptor,
    and a path is looked at only once its parent was found to be a directory
    itself, so no lookup passes through a symlink (an ancestor that is no
    directory in the root condemns everything below it unseen). Raises
    ``OSError`` when a removal fails (the view is then not built)."""
    if not directory.upper_dirs:
        return
    verified = {""}
    condemned: list[str] = []
    root = os.open(directory.root, _DIRECTORY)
    try:
        for path in sorted(directory.upper_dirs, key=lambda p: p.count("/")):
            if os.path.dirname(path) in verified and _is_directory(root, path):
                verified.add(path)
            else:
                condemned.append(path)
    finally:
        os.close(root)
    if not condemned:
        return
    upper = os.open(directory.upper, _DIRECTORY)
    try:
        for path in reversed(condemned):
            os.rmdir(path, dir_fd=upper)
    finally:
        os.close(upper)


def _is_directory(root: int, path: str) -> bool:
    """Whether ``path`` under the descriptor ``root`` is a directory itself
    (not a symlink to one; its parent was checked already)."""
    try:
        return stat.S_ISDIR(os.stat(path, dir_fd=root, follow_symlinks=False).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
