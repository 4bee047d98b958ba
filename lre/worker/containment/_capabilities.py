"""What an action that runs as root keeps of root: uid 0 and a few
capabilities, none of them administrative.

A root lre's actions run as lre's own user with ``action_user: "root"`` (the
default is ``"unprivileged"``, ``nobody``). In their view (``_view.py``) the
masks over lre's directories and the read-only host are mounts of the
action's own mount namespace, and whoever holds ``CAP_SYS_ADMIN`` there
undoes them; ``CAP_DAC_READ_SEARCH`` opens any file by its handle whatever
covers its path. So such an action keeps only ``ALLOWED``: what builds
running as root in a container expect, and nothing that reaches past the
view.

How, without an extra exec: capabilities, the ambient set and the
securebits belong to a *thread*, and a child copies its thread's. In the
spawner thread that forks the action, ``without_root_privileges`` keeps
the inheritable and ambient sets at ``ALLOWED`` (once per thread; lre's
own permitted and effective sets are untouched) and sets
``SECBIT_NOROOT`` only around that fork, clearing it right after, so the
guardian and every other process the thread starts keep full root. Under
``SECBIT_NOROOT`` the kernel no longer gives a uid-0 ``execve`` every
capability: the new program gets exactly the ambient set (a set-user-ID
or file-capability program gets nothing more: the view's mounts are
``nosuid``, so file capabilities and set-user-ID bits are not honoured in
it). The bit is not locked (the action lacks ``CAP_SETPCAP`` to clear it
anyway, and a lock would stay on the spawner thread for good).

Not kept, and why: ``MKNOD`` (the overlay's upper layer, ``TMPDIR`` and
writable paths are not ``nodev``: a device node made there opens the
host's disk), ``NET_RAW`` (the action shares the host's network namespace
unless ``block-network``: a packet socket reads every connection of the
host, lre's own loopback ones included), ``SETPCAP`` and ``SETFCAP``
(they give capabilities back), and every administrative one
(``SYS_ADMIN``, ``DAC_READ_SEARCH``, ``SYS_PTRACE``, ``SYS_MODULE``,
``SYS_RAWIO``, ``NET_ADMIN``, ``SYS_TIME``, ``BPF``, ``PERFMON``, ...).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from lre.worker.containment._syscalls import HELD_LIBC as _LIBC
from lre.worker.containment._throwaway_thread import failure_in_throwaway_thread

__all__ = ["ALLOWED", "ALLOWED_MASK", "root_lock_refusal", "without_root_privileges"]

log = logging.getLogger(__name__)

#: The capabilities a root action keeps (capabilities(7) numbers), and why.
ALLOWED: dict[str, int] = {
    "CHOWN": 0,  # tar and install give files their owners
    "DAC_OVERRIDE": 1,  # root writes and removes read-only files (its inputs' copies)
    "FOWNER": 3,  # chmod, utime and xattrs of files it does not own
    "FSETID": 4,  # chmod keeps set-group-ID bits of directories
    "KILL": 5,  # signals its own processes of other users (its PID namespace only)
    "SETGID": 6,  # drops to another group (a test running as nobody)
    "SETUID": 7,  # drops to another user: away from root, never towards it
    "NET_BIND_SERVICE": 10,  # a test server on a port below 1024
    "SYS_CHROOT": 18,  # chroot into a tree it built (mounts stay the view's)
    "AUDIT_WRITE": 29,  # su, login and sshd log to the audit log or fail
}
#: ``ALLOWED`` as a bit mask (what /proc/<pid>/status shows in hex).
ALLOWED_MASK = sum(1 << number for number in ALLOWED.values())

_SYS_CAPGET = 125
_SYS_CAPSET = 126
_CAPABILITY_VERSION_3 = 0x20080522
_PR_GET_SECUREBITS = 27
_PR_SET_SECUREBITS = 28
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_RAISE = 2
#: securebits(7): a uid-0 execve gets no capabilities beyond the ambient set.
SECBIT_NOROOT = 1 << 0


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


#: Per thread: True once its inheritable and ambient sets are ``ALLOWED``.
_THREAD = threading.local()


def _fail(call: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{call}: {os.strerror(code)}")


def _keep_allowed_for_children() -> None:
    """(the calling thread, once) inheritable = ambient = ``ALLOWED``, its
    own permitted and effective sets unchanged. Raises ``OSError`` naming the
    call (lre lacks one of ``ALLOWED`` or ``CAP_SETPCAP``)."""
    if getattr(_THREAD, "ready", False):
        return
    if _LIBC is None:
        raise OSError("capabilities need Linux")
    header = _Header(_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    if _LIBC.syscall(_SYS_CAPGET, ctypes.byref(header), data) != 0:
        raise _fail("capget")
    data[0].inheritable = ALLOWED_MASK & 0xFFFFFFFF
    data[1].inheritable = ALLOWED_MASK >> 32
    if _LIBC.syscall(_SYS_CAPSET, ctypes.byref(header), data) != 0:
        raise _fail("capset")
    for name, number in ALLOWED.items():
        if _LIBC.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, number, 0, 0) != 0:
            raise _fail(f"prctl(PR_CAP_AMBIENT_RAISE, CAP_{name})")
    _THREAD.ready = True


def _securebits(bits: int) -> None:
    assert _LIBC is not None
    if _LIBC.prctl(_PR_SET_SECUREBITS, bits, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_SECUREBITS)")


@contextmanager
def without_root_privileges() -> Iterator[None]:
    """Around the fork (and exec) of one root action, in the thread that
    forks it: the child gets ``SECBIT_NOROOT`` and ambient ``ALLOWED``, so
    its programs run as uid 0 with ``ALLOWED`` only. Raises ``OSError``
    before anything is forked when a call fails (the caller then decides
    whether the action may run without it). Clearing the bit afterwards
    cannot fail while lre holds ``CAP_SETPCAP``; if it does, it is logged
    and the thread's later children get no more than ``ALLOWED`` either."""
    _keep_allowed_for_children()
    assert _LIBC is not None
    before = int(_LIBC.prctl(_PR_GET_SECUREBITS, 0, 0, 0, 0))
    if before < 0:
        raise _fail("prctl(PR_GET_SECUREBITS)")
    _securebits(before | SECBIT_NOROOT)
    try:
        yield
    finally:
        try:
            _securebits(before)
        except OSError as error:
            log.error("spawner thread: cannot clear SECBIT_NOROOT again (%s)", error)


def root_lock_refusal() -> str | None:
    """Why ``without_root_privileges`` cannot work in this process (tried
    in a throwaway thread), or None when it works."""

    def probe() -> None:
        with without_root_privileges():
            pass

    failure = failure_in_throwaway_thread("lre-caps-probe", probe)
    return None if failure is None else str(failure)
