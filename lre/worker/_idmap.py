"""Inputs that belong to the action's user: an idmapped lower layer.

A root lre running its actions as another user (``action_user``, see
``_identity.py``) stages their inputs as lre's own files: hardlinks to the
CAS's inodes, in directories of lre's. Through an overlay whose lower layer
is that tree as it is, the action's user may not chmod an input, write one
it made writable, nor hardlink one (``fs.protected_hardlinks``), which
builds do. ``InputIdmap`` holds a user namespace, made once per worker at
start-up, whose mapping shows lre's uid and gid as the action's; each
action's view then gives its overlay a lower layer that is an idmapped
clone of the staged tree (``_view.ActionView.idmap``). There the action
owns its inputs, so a chmod, a write or a hardlink copies the file up into
the upper layer (its own, owned by it) and the CAS inode is never touched:
the lower layer stays read-only to everyone, root included. Nothing is
written to disk under the mapping: the upper layer is not idmapped.

Directories the worker stages stay lre's on disk then (the mapping shows
them as the action's; one of the action's user's on disk would show as
nobody's and refuse it).

The kernel must take a detached idmapped mount as an overlay layer given
by file descriptor (Linux 6.13+ for layers by descriptor, later for
detached ones; this host's 6.18 does), and the work directory's filesystem
must allow idmapped mounts (ext4, xfs, btrfs, tmpfs do). ``open_input_idmap``
tries exactly what an action's view will do, once, and raises
``IdmapUnavailable`` saying why when any of it is refused; the worker then
logs a warning and works as before (inputs lre's, directories chowned).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from lre.worker._view_policy import ViewPolicy
from lre.worker.view import ActionView, OverlayXattrs, overlay_mount

__all__ = ["IdmapUnavailable", "InputIdmap", "idmap_views", "open_input_idmap"]

log = logging.getLogger(__name__)

#: Unshares a user namespace, says so on stdout, then waits for stdin to
#: close; its namespace outlives it through the descriptor lre opens.
_HOLDER = (
    "import ctypes, sys\n"
    "if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:\n"
    "    sys.exit(ctypes.get_errno())\n"
    "sys.stdout.write('in\\n'); sys.stdout.flush(); sys.stdin.read()\n"
)


class IdmapUnavailable(OSError):
    """The kernel or filesystem refused part of an idmapped lower layer."""


class InputIdmap:
    """A user namespace whose mapping shows lre's uid and gid as ``owner``'s.

    ``fd`` is what ``ActionView.idmap`` takes; ``close`` releases it (views
    built before keep their mounts).
    """

    def __init__(self, fd: int, owner: tuple[int, int]) -> None:
        self.fd = fd
        self.owner = owner

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _mapping_namespace(owner: tuple[int, int]) -> int:
    """A descriptor of a new user namespace in which lre's euid and egid
    stand for ``owner`` (uid, gid), one id each. Raises ``IdmapUnavailable``
    when the namespace cannot be made or mapped."""
    holder = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _HOLDER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        if holder.stdout.readline() != b"in\n":
            code = holder.wait()
            raise IdmapUnavailable(code, f"unshare(CLONE_NEWUSER): {os.strerror(code)}")
        uid, gid = owner
        for name, line in (
            ("uid_map", f"{os.geteuid()} {uid} 1\n"),
            ("gid_map", f"{os.getegid()} {gid} 1\n"),
        ):
            try:
                with open(f"/proc/{holder.pid}/{name}", "w") as file:
                    file.write(line)
            except OSError as error:
                raise IdmapUnavailable(error.errno, f"writing {name}: {error.strerror}") from None
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.stdin.close()
        holder.stdout.close()
        holder.wait()


def _probe(idmap: InputIdmap, scratch: Path, xattrs: OverlayXattrs) -> None:
    """Mount (detached) the overlay an action's view would get over a tiny
    staged tree, and check that its file shows as the owner's. Raises
    ``IdmapUnavailable`` naming the refused call."""
    for name in ("lower", "upper", "work"):
        (scratch / name).mkdir()
    (scratch / "lower" / "input").write_bytes(b"")
    os.chown(scratch / "upper", *idmap.owner)
    view = ActionView(
        root=str(scratch / "lower"),
        upper=str(scratch / "upper"),
        work=str(scratch / "work"),
        tmp=str(scratch),
        xattrs=xattrs,
        idmap=idmap.fd,
    )
    try:
        mount = overlay_mount(view)
    except OSError as error:
        raise IdmapUnavailable(error.errno, str(error)) from None
    try:
        info = os.stat("input", dir_fd=mount, follow_symlinks=False)
    finally:
        os.close(mount)
    if (info.st_uid, info.st_gid) != idmap.owner:
        raise IdmapUnavailable(
            0, f"the idmapped layer shows {info.st_uid}:{info.st_gid}, not {idmap.owner}"
        )


def open_input_idmap(owner: tuple[int, int], scratch_in: Path, xattrs: OverlayXattrs) -> InputIdmap:
    """The mapping of a worker whose actions run as ``owner`` (uid, gid),
    tried once on a scratch directory made (and removed) in ``scratch_in``
    (the worker's work directory: the filesystem its views will use) with
    overlay marks in ``xattrs``. Raises ``IdmapUnavailable`` saying what the
    kernel refused; nothing is left open then."""
    idmap = InputIdmap(_mapping_namespace(owner), owner)
    try:
        scratch = Path(tempfile.mkdtemp(prefix=".idmap-probe-", dir=scratch_in))
        try:
            _probe(idmap, scratch, xattrs)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    except BaseException:
        idmap.close()
        raise
    return idmap


def idmap_views(policy: ViewPolicy, worker: str, scratch_in: Path) -> InputIdmap | None:
    """Give ``policy``'s views an idmapped lower layer when its actions run
    as another user (``policy.owner``) and ``open_input_idmap`` works here;
    returns the mapping (the caller closes it) or None, after a warning
    naming the worker and what was refused when it does not (its actions
    then cannot chmod, write or hardlink their inputs, as before)."""
    if policy.owner is None:
        return None
    try:
        idmap = open_input_idmap(policy.owner, scratch_in, policy.xattrs)
    except OSError as error:
        log.warning(
            "worker %s: inputs stay lre's in the actions' views (uid %d may not chmod, write "
            "or hardlink them): an idmapped lower layer was refused here: %s",
            worker,
            policy.owner[0],
            error,
        )
        return None
    policy.idmap = idmap.fd
    log.info(
        "worker %s: inputs show as uid %d's in the actions' views (idmapped lower layer)",
        worker,
        policy.owner[0],
    )
    return idmap
