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
  the next action's staging to reuse. The overlay of an action's view keeps
  its upper and work layers on a tmpfs of the action's own (``layers``,
  made by the ``LayerSource`` in the batch thread, one fresh filesystem per
  directory handed out): recycling walks none of it, it only closes the
  descriptors (lre's and the view builder's), and the whole filesystem is
  freed with them and with the view's mount namespace, which, when the
  runner held it past the action's end (``release(view=...)``), is closed
  first, in the same thread (that close unmounts the view and waits for an
  RCU grace period, which the action's exit would otherwise have waited
  for). The next action cannot see anything the previous one wrote into
  its input root, ``/tmp`` or ``/dev/shm``: those were on the dropped tmpfs.
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
from typing import Protocol

import trio

from lre.worker.directories._quarantine import RETRY_S
from lre.worker.directories._removal import remove_tree
from lre.worker.directories._skeleton import scrub_root
from lre.worker.directories._workdir import WorkDirectory

log = logging.getLogger(__name__)

#: Name of the input root inside an action directory.
ROOT_NAME = "root"
#: Mode of the input root (a user the action switches to must be able to
#: enter it, as in Bazel's sandboxes; the action directory around it is
#: 0700, so no other user of the host can).
ROOT_MODE = 0o755
#: Names of the action's stdout and stderr files inside an action directory.
LOG_NAMES = ("stdout", "stderr")
#: Name of the action's private temporary directory (its TMPDIR).
TMP_NAME = "tmp"
#: Name of the directory a directory kept for debugging gets a copy of its
#: view's overlay layers in (``view/upper``: what the action wrote;
#: ``view/work``: empty, for mounting them again).
VIEW_NAME = "view"
_RECYCLABLE = frozenset((ROOT_NAME, TMP_NAME, *LOG_NAMES))


@dataclass(frozen=True, slots=True)
class ActionLayers:
    """An action's own tmpfs holding its overlay's ``upper`` and ``work``
    (``_view.make_layers``), a detached mount: ``fd`` is lre's descriptor
    of it (outputs are read through it), ``builder_fd`` the view builder's
    (the same one where lre builds views itself; the view helper's own
    under ``userns``), which the view names it by."""

    fd: int
    builder_fd: int

    @property
    def upper(self) -> Path:
        """The upper layer as lre reaches it (through its descriptor)."""
        return Path(f"/proc/self/fd/{self.fd}/upper")


class LayerSource(Protocol):
    """Makes and drops action tmpfs (``ViewPolicy``: in lre's process or by
    the view helper, as the containment backend can)."""

    def make_layers(self, count: int) -> list[ActionLayers]:
        """``count`` fresh ones; raises ``OSError`` (none left open)."""
        ...

    def drop_layers(self, layers: list[ActionLayers]) -> None:
        """Close every descriptor of ``layers`` (logged, never raises)."""
        ...


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
    #: Empty directories already under ``root`` (relative paths), left by
    #: the previous action; ``stage_inputs`` reuses or removes them.
    existing: frozenset[str] = frozenset()
    #: The action's own tmpfs for its view's overlay (None: not made, no
    #: view, or dropped).
    layers: ActionLayers | None = None

    @property
    def upper(self) -> Path:
        """What the action wrote into its input root (in a view), as lre
        reaches it. Raises ``OSError`` when it has no layers."""
        if self.layers is None:
            raise OSError(f"action directory {self.path} has no overlay layers")
        return self.layers.upper

    @property
    def kept(self) -> Path:
        """Where a directory kept for debugging has its upper layer copied."""
        return self.path / VIEW_NAME / "upper"

    @classmethod
    def at(cls, path: Path) -> ActionDirectory:
        return cls(
            path, path / ROOT_NAME, path / LOG_NAMES[0], path / LOG_NAMES[1], path / TMP_NAME
        )


class ActionDirectories:
    """Ready-made action directories and deferred removal for one worker.

    ``stock``: how many empty directories to keep ready (the worker's
    concurrency is a good value; at least 1). ``owner`` (uid, gid): the user
    actions run as (``_identity.py``; None: lre's own), given each
    directory's ``tmp/`` and accepted as the owner of what is recycled.
    ``layers``: where the views' tmpfs come from (None: actions run in no
    view), one given to each directory handed out.
    """

    def __init__(
        self,
        workdir: WorkDirectory,
        *,
        stock: int,
        owner: tuple[int, int] | None = None,
        layers: LayerSource | None = None,
    ) -> None:
        self.workdir = workdir
        self.owner = owner
        self._layers = layers
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
            directory = self._stock.pop()
            if len(self._stock) < self.stock_size // 2:
                self._wake.set()
            if directory.layers is not None or self._layers is None:
                return directory
            try:  # the batch could not make its layers: once more, now
                return await trio.to_thread.run_sync(self._with_layers, directory)
            except BaseException:
                self._doomed.append(directory)
                self._wake.set()
                raise
        self._wake.set()
        return await trio.to_thread.run_sync(self._make_with_layers)

    async def forget(self, directory: ActionDirectory) -> None:
        """Drop the tmpfs of a directory kept for debugging (never released;
        its upper layer was copied to ``kept``). Never raises."""
        if directory.layers is not None and self._layers is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._layers.drop_layers, [directory.layers])

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

    def _with_layers(self, directory: ActionDirectory) -> ActionDirectory:
        """``directory`` given a fresh tmpfs of its own for its view; raises
        ``OSError`` when none can be made."""
        assert self._layers is not None
        return dataclasses.replace(directory, layers=self._layers.make_layers(1)[0])

    def _make_with_layers(self) -> ActionDirectory:
        directory = self._make()
        if self._layers is None:
            return directory
        try:
            return self._with_layers(directory)
        except BaseException:
            self._remove_all([directory])
            raise

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
        self._drop_layers([*trash, *doomed])
        ready: list[ActionDirectory] = []
        removing: list[ActionDirectory] = []
        mounts = self.workdir.mounts
        for directory in (*trash, *doomed):
            if mounts.below(directory.path):  # cheap while the mount table is unchanged
                mounts.detach_below(directory.path)
        for directory in trash:
            recycled = _recycle(directory, self._owners) if len(ready) < keep else None
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
        return self._give_layers(ready)

    def _give_layers(self, ready: list[ActionDirectory]) -> list[ActionDirectory]:
        """``ready`` each with a fresh tmpfs, made in one call (a failure is
        logged and leaves them without: ``take`` tries again)."""
        if self._layers is None or not ready:
            return ready
        try:
            made = self._layers.make_layers(len(ready))
        except OSError:
            log.exception("worker directory %s: cannot make views' tmpfs", self.workdir.path)
            return ready
        return [
            dataclasses.replace(directory, layers=layers)
            for directory, layers in zip(ready, made, strict=True)
        ]

    def _drop_layers(self, directories: list[ActionDirectory]) -> None:
        """Drop the tmpfs of ``directories`` (released: their views closed)."""
        dropped = [d.layers for d in directories if d.layers is not None]
        if dropped and self._layers is not None:
            self._layers.drop_layers(dropped)

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
        self._drop_layers(directories)
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


def _recycle(directory: ActionDirectory, owners: tuple[int, ...]) -> ActionDirectory | None:
    """``directory`` made ready for another action if it holds only what an
    action directory starts with plus what ``scrub_root`` can clear (see the
    module docstring); None when it does not or a call fails (then it must be
    removed: its logs may be truncated and files under root unlinked, nothing
    else is changed). ``owners``: the uids its directories may belong to.
    Its layers were dropped already: the result has none."""
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
    existing = scrub_root(directory.root, owners)
    if existing is None:
        return None
    return dataclasses.replace(directory, existing=existing, layers=None)


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
