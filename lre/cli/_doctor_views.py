"""``lre doctor``'s ``view filesystem`` check: where the action directories live.

Each action's directory (``work_directory``) holds its staged input root, its
``TMPDIR`` and its logs, so what an action and its staging create and delete
lands there (the view's overlay layers are on a tmpfs of the action's own and
do not). On an ext4 without a journal, ext4 refuses to hand
out an inode number deleted in the last minute or so and looks at each such
candidate in turn before it picks one, so with lre's churn every new inode
gets dearer (docs/performance.md has the figures against a journaled ext4).

An ext4 mount has a journal when its ``/proc/fs/ext4/<device>/options`` lists
a ``data=`` mode; the device is the kernel's name of the block device behind
the path (``/sys/dev/block/MAJOR:MINOR``, which also names LVM and other
mapped devices by their kernel name, ``dm-0``). Anything not ext4 (tmpfs,
btrfs, xfs) has no such check and is not reported.

Never raises: a path or a ``/proc`` file that cannot be read makes the check
say so and pass (it is advice, not a failure).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lre.cli._checks import Check
from lre.config import Config, nearest_existing_dir

__all__ = ["Ext4Mount", "ext4_mount_of", "view_filesystem_check"]

FIX = (
    "put the workers' work_directory on a filesystem with a journal (a laptop's ext4, "
    "btrfs or xfs has one; `tune2fs -O has_journal` adds one to an unmounted ext4), "
    "or accept the slower views"
)


@dataclass(frozen=True, slots=True)
class Ext4Mount:
    """The ext4 filesystem a path lies on."""

    #: The kernel's name of its block device (``vda``, ``dm-0``, ``loop0``).
    device: str
    #: Whether it has a journal (its options name a ``data=`` mode).
    journal: bool


def _mount_type(dev: int, mountinfo: str) -> str | None:
    """The filesystem type of the mount whose device is ``dev``, from the text
    of a ``/proc/<pid>/mountinfo`` (the last such mount: the one on top)."""
    wanted = f"{os.major(dev)}:{os.minor(dev)}"
    found: str | None = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[2] != wanted or " - " not in line:
            continue
        after = line.split(" - ", 1)[1].split()
        if after:
            found = after[0]
    return found


def ext4_mount_of(path: str, *, proc: str = "/proc", sys: str = "/sys") -> Ext4Mount | None:
    """The ext4 filesystem ``path`` (or its nearest existing ancestor) lies
    on, or None when it is another kind or cannot be told (``proc`` and
    ``sys`` name where procfs and sysfs are mounted). Raises ``OSError``
    when ``path`` or those files cannot be read."""
    dev = os.stat(nearest_existing_dir(path)).st_dev
    mounts = Path(proc, "self", "mountinfo").read_text()
    if _mount_type(dev, mounts) != "ext4":
        return None
    block = Path(sys, "dev", "block", f"{os.major(dev)}:{os.minor(dev)}")
    device = os.path.basename(os.path.realpath(block))
    options = Path(proc, "fs", "ext4", device, "options").read_text().splitlines()
    return Ext4Mount(device, any(line.startswith("data=") for line in options))


def view_filesystem_check(config: Config, *, proc: str = "/proc", sys: str = "/sys") -> Check:
    """WARN when a local worker with views (``sandbox_view``) keeps its action
    directories on an ext4 without a journal; OK when none does; SKIP when
    no worker makes views."""
    name = "view filesystem"
    workers = [w.local for w in config.workers if w.local is not None and w.local.sandbox_view]
    if not workers:
        return Check(name, "SKIP", "no local worker runs actions in views (sandbox_view)")
    slow: list[str] = []
    for worker in workers:
        where = worker.work_directory
        try:
            mount = ext4_mount_of(where, proc=proc, sys=sys)
        except OSError as error:
            return Check(name, "OK", f"cannot tell the filesystem of {where} ({error})")
        if mount is not None and not mount.journal:
            slow.append(f"{where} (worker {worker.name}, /dev/{mount.device})")
    if slow:
        return Check(
            name,
            "WARN",
            "action directories on ext4 without a journal: "
            + "; ".join(slow)
            + ". Every file an action or its staging creates there (TMPDIR files, staged "
            "directories) then costs more kernel CPU than on a journaled ext4 (ext4 steps "
            "over recently deleted inode numbers one by one; docs/troubleshooting.md)",
            FIX,
        )
    return Check(name, "OK", "action directories on a filesystem with a journal or none needed")
