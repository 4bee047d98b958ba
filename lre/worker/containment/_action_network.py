"""The network every action runs in: a namespace of its own, shared by the
actions of one lre, where lre's listeners do not exist.

An action that shared lre's network namespace could connect to lre's own
gRPC and status ports on 127.0.0.1 (and to the host's abstract Unix
sockets), whatever a guard in front of them guessed about who holds the
connection. So the namespaced backends run every action in a network
namespace made once per lre at start-up (``pidns``: by a throwaway thread,
held as a descriptor and entered with ``setns`` around each fork;
``userns``: the view helper's own, entered with ``nsenter``). Its loopback
is its own: the host's ``127.0.0.0/8`` and the host's abstract sockets are
not there by any path, and that holds for every thread, descriptor and
helper of the action, since nothing in the namespace leads out of it except
the stack below.

Outside addresses stay reachable, as Bazel's local sandbox gives them by
default: ``OutsideNetwork`` starts one ``slirp4netns`` per lre (not per
action) attached to that namespace, with ``--disable-host-loopback``, so the
gateway it provides (10.0.2.2) never leads to the host's loopback. Without
``slirp4netns`` on PATH the namespace has only its loopback: actions reach
nothing outside the machine, which is logged once at start-up and shown by
``lre doctor``; lre's listeners stay out of reach either way.

Actions that ask for ``block-network`` still get a namespace each of their
own with only loopback (``PidNamespace``), as Bazel's sandbox gives them.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from lre.hop import reap
from lre.worker.containment._syscalls import call as _call
from lre.worker.containment._syscalls import loopback_up
from lre.worker.containment._throwaway_thread import failure_in_throwaway_thread

__all__ = ["OutsideNetwork", "make_network_namespace"]

log = logging.getLogger(__name__)

_CLONE_NEWNET = 0x40000000
#: How long slirp4netns may take to configure the namespace.
_READY_SECONDS = 10.0


def make_network_namespace() -> int:
    """A new network namespace with its loopback up, as a descriptor (close
    it to let the namespace go once nothing runs in it). Made by a
    throwaway thread, so no thread of lre ever stays in it. Raises
    ``OSError`` naming the refused call (it needs CAP_SYS_ADMIN)."""
    result: list[int] = []

    def make() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _call("unshare", _CLONE_NEWNET, release=True)
            try:
                loopback_up()
                result.append(os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC))
            finally:
                _call("setns", own, _CLONE_NEWNET)
        finally:
            os.close(own)

    failure = failure_in_throwaway_thread("lre-action-network", make)
    if failure is not None:
        raise failure
    return result[0]


class OutsideNetwork:
    """One ``slirp4netns`` joining the actions' namespace to outside
    addresses (never to the host's loopback); see the module docstring.

    ``start`` returns False (logged once, with the reason) when it cannot
    run: ``slirp4netns`` missing or failing; the actions then reach only
    their own loopback. It exits when lre closes its end of a pipe, so it
    never outlives lre, even one killed with SIGKILL.
    """

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._exit_write: int | None = None
        #: Why actions reach nothing outside (None while they do, or before ``start``).
        self.missing: str | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, target: Sequence[str], pass_fds: Sequence[int] = ()) -> bool:
        """Attach to the namespace named by ``target`` (slirp4netns's
        arguments before the interface: ``[PID]``, or ``["--netns-type=path",
        PATH]``), handing it ``pass_fds``. True once it configured the
        namespace."""
        program = shutil.which("slirp4netns")
        if program is None:
            return self._fail(
                "slirp4netns is not installed (Debian, Ubuntu: apt install slirp4netns)"
            )
        failures: list[str] = []
        # The sandbox (its own mount namespace, capabilities dropped as root)
        # first; it refuses to start where /etc/resolv.conf links outside
        # /etc and /run, and then the stack runs without it.
        for sandbox in (("--enable-sandbox",), ()):
            failure = self._try(program, sandbox, target, pass_fds)
            if failure is None:
                return True
            failures.append(failure)
        return self._fail("; ".join(failures))

    def _try(
        self,
        program: str,
        sandbox: Sequence[str],
        target: Sequence[str],
        pass_fds: Sequence[int],
    ) -> str | None:
        """One start; None when it is up, else why not (it was reaped)."""
        exit_read, exit_write = os.pipe2(os.O_CLOEXEC)
        ready_read, ready_write = os.pipe2(os.O_CLOEXEC)
        argv = [
            program,
            "--configure",
            "--mtu=65520",
            "--disable-host-loopback",
            f"--exit-fd={exit_read}",
            f"--ready-fd={ready_write}",
            *sandbox,
            *target,
            "tap0",
        ]
        # Its messages go to an unnamed file (a pipe nobody drains would
        # block it once full), read back only when it failed.
        with tempfile.TemporaryFile() as messages:
            try:
                process = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=messages,
                    pass_fds=(exit_read, ready_write, *pass_fds),
                    start_new_session=True,
                )
            except OSError as error:
                for fd in (exit_read, exit_write, ready_read, ready_write):
                    os.close(fd)
                return f"cannot run slirp4netns: {error}"
            os.close(exit_read)
            os.close(ready_write)
            ready = self._wait_ready(ready_read)
            os.close(ready_read)
            if ready and process.poll() is None:
                self._process = process
                self._exit_write = exit_write
                return None
            os.close(exit_write)  # it exits on this, if still running
            reap(process)
            messages.seek(0)
            text = messages.read().decode(errors="replace").strip().splitlines()
        return f"slirp4netns {' '.join(sandbox) or 'without sandbox'}: " + (
            text[-1] if text else f"exit {process.returncode}"
        )

    @staticmethod
    def _wait_ready(fd: int) -> bool:
        """Whether slirp4netns wrote its ready byte within ``_READY_SECONDS``
        (end of file first: it failed)."""
        readable, _, _ = select.select([fd], [], [], _READY_SECONDS)
        if not readable:
            return False
        try:
            return os.read(fd, 1) == b"1"
        except OSError:
            return False

    def _fail(self, reason: str) -> bool:
        self.missing = reason
        log.warning(
            "actions reach no address outside this machine, only their own loopback: %s",
            reason,
        )
        return False

    def close(self) -> None:
        """Stop slirp4netns (it exits on the closed pipe) and reap it."""
        process, self._process = self._process, None
        if self._exit_write is not None:
            os.close(self._exit_write)
            self._exit_write = None
        if process is None:
            return
        reap(process)
