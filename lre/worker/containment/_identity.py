"""The unprivileged identity an action runs as when lre runs as root.

``workers[].local.action_user`` names it (``resolve_action_user``):

- ``"root"`` (the default) or any name of uid 0: lre's own user;
- ``"unprivileged"``: the user ``nobody`` (its own group, no others)
  when lre runs as root and the worker's actions get a view of their own
  (containment ``pidns`` with ``sandbox_view``); lre's own user otherwise;
- a user name, a uid, or ``uid:gid``: that identity (only where ``unprivileged``
  would pick ``nobody``: elsewhere lre cannot switch identities, or the
  action, outside a view, could not reach its own directory);

Its inputs are lre's files; ``_idmap.py`` shows them as the action's in
its view, so it may chmod, write (into its copy) and hardlink them as an
action of lre's own user does. Where the kernel refuses that the worker
says so at start-up and such an action fails there ("Operation not
permitted"). Not the default yet: as ``nobody`` an action cannot enter a
0700 directory on the way to a path a build gives it (a writable path, a
test's scratch directory under ``/tmp/pytest-of-root``), which actions of
lre's own user can.

``ActionIdentity.prefix()`` is what ``run_process`` puts in front of the
action's command: util-linux ``setpriv`` switching to the identity with no
supplementary groups, ``no_new_privs`` (a setuid or file-capability program
gains nothing), an empty capability bounding set and no inheritable
capabilities. It runs as the last exec before the command, after the
namespace's first process (root) and the view's gate, so the action's own
processes never hold a capability of any namespace: they cannot unmount a
mask of the view nor make a read-only mount writable, and lre's files are
not theirs even where a path reached them. An extra exec costs less than
Python's own ``user=`` for ``subprocess``, which must ``fork`` (copying
lre's page tables) where it otherwise uses ``vfork``.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
from dataclasses import dataclass

__all__ = ["AUTO_USER", "ActionIdentity", "resolve_action_user"]

#: The value of ``action_user`` that picks ``nobody`` where it can.
AUTO_USER = "unprivileged"
#: Whom ``unprivileged`` picks when lre is root.
_UNPRIVILEGED = "nobody"


@dataclass(frozen=True, slots=True)
class ActionIdentity:
    """A uid and gid actions run as (never 0), and how to become them."""

    uid: int
    gid: int
    #: What the configuration named (for messages).
    name: str
    #: util-linux setpriv's path.
    setpriv: str

    @property
    def owner(self) -> tuple[int, int]:
        """``(uid, gid)``: what the action's writable directories belong to."""
        return self.uid, self.gid

    def prefix(self) -> list[str]:
        """The argv that runs what follows it as this identity, unprivileged."""
        return [
            self.setpriv,
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            "--no-new-privs",
            "--bounding-set=-all",
            "--inh-caps=-all",
            "--",
        ]


def _parse(value: str) -> tuple[int, int]:
    """``(uid, gid)`` for a user name, a uid or ``uid:gid``; raises ``ValueError``."""
    user, _, group = value.partition(":")
    if user.isdigit():
        uid = int(user)
        try:
            gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            gid = uid
    else:
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            raise ValueError(f"{value!r}: no such user on this host") from None
        uid, gid = entry.pw_uid, entry.pw_gid
    if group:
        if group.isdigit():
            gid = int(group)
        else:
            try:
                gid = grp.getgrnam(group).gr_gid
            except KeyError:
                raise ValueError(f"{value!r}: no such group {group!r} on this host") from None
    return uid, gid


def resolve_action_user(
    value: str, *, viewed: bool, euid: int | None = None
) -> ActionIdentity | None:
    """The identity ``value`` (``action_user``) names, or None for lre's own
    user. ``viewed``: the worker's actions get a view (pidns with
    ``sandbox_view``); ``euid``: lre's (default: this process's).

    Raises ``ValueError`` saying why when the value names no user or group
    of this host, when lre is not root and the value names another user,
    when the actions would get no view, or when ``setpriv`` is missing.
    """
    own = os.geteuid() if euid is None else euid
    text = value.strip()
    if text == AUTO_USER:
        if own != 0 or not viewed:
            return None
        text = _UNPRIVILEGED
        try:
            pwd.getpwnam(text)
        except KeyError:
            raise ValueError(
                f"{AUTO_USER!r} runs actions as {text!r}, which this host lacks; name another "
                "unprivileged user, or 'root' to run actions as lre's own user"
            ) from None
    if not text:
        raise ValueError(f"'' names no user ({AUTO_USER!r}, a user name, uid or uid:gid)")
    uid, gid = _parse(text)
    if uid == 0:
        return None
    if own != 0:
        if uid == own:
            return None
        raise ValueError(
            f"{value!r}: only root can run actions as another user; lre runs as uid {own}"
        )
    if not viewed:
        raise ValueError(
            f"{value!r}: actions run as another user only in a view of their own "
            "(containment 'pidns' with sandbox_view: true); set 'root' for lre's own user"
        )
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise ValueError(f"{value!r}: util-linux setpriv is not on PATH")
    return ActionIdentity(uid, gid, text, setpriv)
