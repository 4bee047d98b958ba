"""Keeping everything an action starts inside the action's lifetime.

An action may start processes that leave its session and process group
(``setsid``, a double fork, a daemon). ``Containment`` is what makes sure
none of them outlives the action, nor lre. Three backends implement it:

``PidNamespace`` (``"pidns"``, the default where lre may create PID namespaces,
which on Linux means running with CAP_SYS_ADMIN, for example as root)
    Each action's first process is the first process (pid 1) of a PID
    namespace of its own. When it exits, the kernel SIGKILLs every other
    process of the namespace and reaps them *before* the first process is
    reported as exited, so by the time lre sees the action end nothing of it
    runs any more: its directory can be recycled and its outputs adopted
    without a race. The namespace is made by the spawner thread itself
    (``unshare(CLONE_NEWPID)`` just before the fork and ``setns`` back to
    lre's own namespace right after): it costs no extra process.

    In a view (``SpawnOptions.view``) the spawner thread also makes the
    action's mount namespace, and where the kernel can mount a procfs for a
    named PID namespace (Linux 6.15+) it mounts the action's ``/proc``
    itself, right after the fork: the first process is then POSIX ``sh``
    reading a gate on its stdin (a pipe lre holds) before it executes
    ``timeout`` with stdin from ``/dev/null``; lre writes ``go`` once the
    mount is there, and closes the pipe without it when the mount failed
    (the gate then exits 125 and nothing of the action ran). Elsewhere
    ``unshare --mount-proc`` (an extra exec and an extra mount namespace per
    action) mounts it before executing ``timeout``.

    The first process is coreutils ``timeout 0`` (no time limit), which runs
    the command as its child, forwards SIGTERM to it and exits with its
    status. The command must not be pid 1 itself: pid 1 of a namespace does
    not receive signals it has no handler for from inside the namespace, so
    a script ending itself with ``kill -SEGV $$`` would exit 0, a wrong
    result. Being pid 1, ``timeout`` cannot re-raise a signal that killed the
    command; it exits with 128 + the signal, which ``_process.py`` reports as
    that signal. If lre dies, the guardian (``_guardian.py``) SIGKILLs each
    namespace's first process, and the kernel the rest.

``UserNamespace`` (``"userns"``, Linux without privileges)
    The same, one PID namespace per action, made inside a user namespace by
    util-linux ``unshare`` in front of the command (see its docstring).

``ProcessGroupSweep`` (``"portable"``, what a machine without namespaces gets)
    The action runs in a session of its own; lre makes itself a child
    subreaper (Linux) so that processes orphaned by an action are re-parented
    to lre instead of init. When an action ends, its group is killed and lre's
    orphans (the children of its main thread: lre itself starts processes
    from other threads) are swept: an orphan born while this action ran and
    while no other running action did is killed; one that another running
    action may own is left to that action's end, and the directory of the
    action that ended is then not recycled, its outputs are copied rather than
    moved and its hardlinked inputs are discarded (``ended_alone`` is False).
    If lre dies, the guardian kills the listed groups, the orphans lre had
    found, and the descendants of both.

``choose_containment(mode)`` picks the strongest backend for ``"strongest"``, or
the one named, failing with a message that says why when it is unavailable.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import trio

from lre.worker._guardian import ProcessGuardian
from lre.worker._protections import missing_protections, namespace_refusals
from lre.worker._syscalls import LIBC as _LIBC
from lre.worker._syscalls import call as _call
from lre.worker._syscalls import kill as _kill
from lre.worker._syscalls import killpg as _killpg
from lre.worker._syscalls import loopback_up as _loopback_up
from lre.worker._syscalls import reap as _reap
from lre.worker._syscalls import stat_fields as _stat_fields
from lre.worker._view import (
    ActionView,
    OverlayXattrs,
    build_view,
    mount_children_proc,
    proc_pidns_works,
)
from lre.worker._view_helper import ViewHelper

__all__ = [
    "CONTAINMENT_MODES",
    "Containment",
    "ContainmentUnavailable",
    "PidNamespace",
    "ProcessGroupSweep",
    "choose_containment",
    "prepare_spawner_thread",
]

log = logging.getLogger(__name__)

#: Values of ``worker.local.containment``.
CONTAINMENT_MODES = ("strongest", "strict", "pidns", "userns", "portable")

_CLONE_NEWNS = 0x00020000
_CLONE_FS = 0x00000200
_CLONE_NEWNET = 0x40000000
_CLONE_NEWPID = 0x20000000
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
#: The first process of a view whose /proc the spawner mounts: it waits for
#: ``go`` on its stdin (lre's end of a pipe), then executes the rest of its
#: arguments with stdin from /dev/null; 125 when lre did not say ``go``.
_PROC_GATE = 'IFS= read -r gate; [ "$gate" = go ] || exit 125; exec "$@" </dev/null'
#: Exit status of a gate that was not opened (the view's /proc is missing).
GATE_CLOSED_EXIT = 125
#: Sweeps at most this many generations of orphans at an action's end.
_SWEEP_PASSES = 16


class ContainmentUnavailable(Exception):
    """The containment mode asked for cannot work on this machine (the message says why)."""


@dataclass(frozen=True, slots=True)
class SpawnOptions:
    """Per-action choices a backend applies when it starts the process."""

    #: Run without network: a network namespace of its own with only loopback.
    block_network: bool = False
    #: Run in a mount namespace shaped as this view (``_view.py``); only
    #: where ``can_view``.
    view: ActionView | None = None
    #: The action's working directory (a path in its view).
    cwd: str = ""


class Containment(ABC):
    """How an action's process tree is started, ended and kept from outliving lre.

    Methods named ``spawn_*`` run in a spawner thread (see ``_process.py``);
    the others on the Trio thread.
    """

    #: The mode's name as configured and reported (``pidns``, ``userns``,
    #: ``portable``).
    name: str
    #: True when this backend can give an action a network namespace.
    can_block_network: bool = False
    #: True when nothing of an action can run once its first process was
    #: reaped, whatever happened (``end`` always returns True).
    ends_alone: bool = False
    #: True when the first process reports a signal that killed the command
    #: as exit code 128 + signal (it cannot re-raise it).
    signals_as_exit_codes: bool = False
    #: True when this backend can run an action in a view of its own
    #: (``SpawnOptions.view``): a mount namespace with the host read-only,
    #: lre's directories hidden, inputs behind an overlay and a /proc of its
    #: own. Without it none of those protections hold (docs/security.md).
    can_view: bool = False
    #: Where the overlays of this backend's views keep their marks
    #: (``ActionView.xattrs``): ``user`` where the view is built inside a
    #: user namespace, which cannot write ``trusted.*`` xattrs.
    overlay_xattrs: OverlayXattrs = "trusted"

    def __init__(self) -> None:
        #: Kills every listed action when lre dies (started on first use).
        self.guardian = ProcessGuardian()

    @abstractmethod
    def command(self, argv: Sequence[str], *, view: bool = False) -> list[str]:
        """The argv to execute for the action's ``argv`` (in a view when
        ``view``, only where ``can_view``)."""

    @contextmanager
    def spawn_context(self, options: SpawnOptions) -> Iterator[list[str]]:
        """Wraps the fork of one action (in the spawner thread) and gives the
        argv to put in front of ``command`` (empty unless a backend needs
        one). Raises ``OSError`` when the namespace cannot be made. Callers
        ask for ``block_network`` only where ``can_block_network``."""
        yield []

    def spawn_stdin(self) -> int:
        """(spawner thread, inside ``spawn_context``) The first process's
        stdin: ``subprocess.DEVNULL`` unless the backend gates it (a pipe
        descriptor, see ``PidNamespace``)."""
        return subprocess.DEVNULL

    def spawn_started(self, pid: int) -> None:
        """The action's first process ``pid`` was forked (spawner thread):
        list it with the guardian."""
        self.guardian.add(pid)

    def spawn_abandoned(self, pid: int) -> None:
        """``pid`` was started but will never be supervised: kill it (the
        caller reaps it)."""
        self.signal_action(pid, signal.SIGKILL)
        self.guardian.remove(pid)

    def action_roots(self) -> list[int]:
        """Processes every running action's processes descend from (or are):
        the first processes and listed orphans (lre's listeners refuse
        connections held by any of them or their descendants)."""
        return list(self.guardian.listed())

    @abstractmethod
    def signal_action(self, pid: int, sig: int) -> None:
        """Send ``sig`` to the action whose first process is ``pid``."""

    @abstractmethod
    def end(self, pid: int, *, killed: bool = False) -> bool:
        """The first process ``pid`` exited (not reaped yet; ``killed`` when
        lre killed it): make sure nothing the action started still runs.
        Returns True when nothing of the action can still run (its directory
        can be reused, its files moved)."""

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """A background task the composition root runs for the backend while
        lre serves (none by default)."""
        task_status.started()


def prepare_spawner_thread() -> None:
    """Give the calling (spawner) thread a filesystem context (root, cwd) of
    its own: a thread sharing it with the others may not enter a mount
    namespace, so without this no view can be made from it. Logs and goes
    on when the call fails (views then fail at their first use)."""
    if _LIBC is None:
        return
    try:
        _call("unshare", _CLONE_FS)
    except OSError as error:
        log.warning("spawner thread: cannot unshare its filesystem context (%s)", error)


# --------------------------------------------------------------------------- pidns


class PidNamespace(Containment):
    """One PID namespace per action (see the module docstring).

    Raises ``ContainmentUnavailable`` when this process may not make PID
    namespaces (it needs CAP_SYS_ADMIN) or coreutils ``timeout`` (the
    namespace's first process) is missing.
    """

    name = "pidns"
    can_block_network = True
    ends_alone = True
    signals_as_exit_codes = True
    can_view = True

    def __init__(self) -> None:
        if _LIBC is None:
            raise ContainmentUnavailable("PID namespaces need Linux")
        init = shutil.which("timeout")
        if init is None:
            raise ContainmentUnavailable(
                "coreutils timeout is not on PATH (it is pid 1 of each action's namespace)"
            )
        super().__init__()
        self._init = init
        #: POSIX sh: the gate of a view whose /proc the spawner mounts
        #: (None: the kernel cannot, or no sh; then util-linux unshare
        #: mounts each view's /proc, see _view.py)
        sh = shutil.which("sh")
        self._gate_sh = sh if sh is not None and proc_pidns_works() else None
        self._unshare = shutil.which("unshare")
        self._own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self._own_net_ns = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self._own_mnt_ns = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        #: per spawner thread: the read end of the running spawn's gate
        self._gate = threading.local()
        self._probe()
        can_mount_proc = self._gate_sh is not None or self._unshare is not None
        self.can_view = can_mount_proc and self._probe_view()

    def _probe_view(self) -> bool:
        """Whether a mount namespace can be made and left here (logged if not)."""
        failure: list[BaseException] = []

        def probe() -> None:
            try:
                _call("unshare", _CLONE_FS)
                _call("unshare", _CLONE_NEWNS)
                _call("setns", self._own_mnt_ns, _CLONE_NEWNS)
            except OSError as error:
                failure.append(error)

        thread = threading.Thread(target=probe, name="lre-view-probe")
        thread.start()
        thread.join()
        if failure:
            log.warning("containment pidns: actions get no view of their own (%s)", failure[0])
        return not failure

    def _probe(self) -> None:
        """Make and leave one namespace in a throwaway thread, so that a
        missing privilege shows at start-up, not at the first action."""
        failure: list[BaseException] = []

        def probe() -> None:
            try:
                with self.spawn_context(SpawnOptions()):
                    pass
            except OSError as error:
                failure.append(error)

        thread = threading.Thread(target=probe, name="lre-pidns-probe")
        thread.start()
        thread.join()
        if failure:
            raise ContainmentUnavailable(
                f"cannot make a PID namespace ({failure[0]}); it needs CAP_SYS_ADMIN"
            )

    def command(self, argv: Sequence[str], *, view: bool = False) -> list[str]:
        # timeout execvp()s argv with the action's PATH, argv[0] unchanged;
        # a duration of 0 sets no limit. In a view, the gate waits for the
        # spawner's /proc (or unshare first mounts the namespace's own),
        # then executes timeout (still pid 1).
        init = [self._init, "--", "0", *argv]
        if view and self._gate_sh is not None:
            return [self._gate_sh, "-c", _PROC_GATE, "sh", *init]
        if view and self._unshare is not None:
            return [self._unshare, "--mount-proc", "--propagation", "unchanged", "--", *init]
        return init

    def spawn_stdin(self) -> int:
        gate: int | None = getattr(self._gate, "read", None)
        return subprocess.DEVNULL if gate is None else gate

    @contextmanager
    def spawn_context(self, options: SpawnOptions) -> Iterator[list[str]]:
        # The thread's namespace for children is set back to lre's own first:
        # a thread whose last child namespace already had its first process
        # cannot fork again (ENOMEM) nor unshare a new one (EINVAL).
        _call("setns", self._own_pid_ns, _CLONE_NEWPID)
        _call("unshare", _CLONE_NEWPID)
        try:
            if options.view is not None:
                _call("unshare", _CLONE_NEWNS)
                try:
                    build_view(options.view, host_proc_writable=self._gate_sh is None)
                    with self._gated(), self._network(options):
                        yield []
                finally:
                    _call("setns", self._own_mnt_ns, _CLONE_NEWNS)
            else:
                with self._network(options):
                    yield []
        finally:
            _call("setns", self._own_pid_ns, _CLONE_NEWPID)

    @contextmanager
    def _gated(self) -> Iterator[None]:
        """Around the fork of a view's first process: its gate (``spawn_stdin``),
        and once it was forked, the view's /proc mounted and the gate opened.
        A /proc that cannot be mounted leaves the gate closed (logged)."""
        if self._gate_sh is None:
            yield
            return
        read, write = os.pipe2(os.O_CLOEXEC)
        self._gate.read = read
        try:
            yield
            # The first process exists (the fork returned): its namespace can
            # be named now.
            try:
                mount_children_proc()
            except OSError as error:
                log.error("containment pidns: no /proc for the action's view (%s)", error)
            else:
                os.write(write, b"go\n")
        finally:
            self._gate.read = None
            os.close(read)
            os.close(write)

    @contextmanager
    def _network(self, options: SpawnOptions) -> Iterator[None]:
        if not options.block_network:
            yield
            return
        _call("unshare", _CLONE_NEWNET)
        try:
            _loopback_up()
            yield
        finally:
            _call("setns", self._own_net_ns, _CLONE_NEWNET)

    def signal_action(self, pid: int, sig: int) -> None:
        # The group reaches the children; pid 1 of the namespace gets a signal
        # from here only if it handles it, SIGKILL always (and then the
        # kernel kills the whole namespace).
        _killpg(pid, sig)
        if sig == signal.SIGKILL:
            _kill(pid, sig)

    def end(self, pid: int, *, killed: bool = False) -> bool:
        # The kernel killed and reaped the rest of the namespace before the
        # first process was reported as exited.
        self.guardian.remove(pid)
        return True


# --------------------------------------------------------------------------- userns


class UserNamespace(Containment):
    """A PID namespace per action without privileges, inside a user namespace.

    lre is multi-threaded, and a multi-threaded process may not enter a user
    namespace, so each action starts through util-linux ``unshare --user
    --map-current-user --pid --fork --kill-child``: ``unshare`` stays in
    lre's namespace and waits, its child is pid 1 of the new one (again
    ``timeout -- 0``, so the command is not pid 1) and dies with it. The
    command keeps lre's user id (mapped to itself). When the action exits
    normally, ``unshare`` has waited for pid 1, whose exit killed and reaped
    the namespace: nothing runs any more. When lre kills it, the namespace
    dies a moment after ``unshare``; ``end`` then answers False (directory
    removed, outputs copied). Raises ``ContainmentUnavailable`` when
    ``unshare`` or ``timeout`` is missing or the kernel refuses unprivileged
    user namespaces (some distributions restrict them).
    """

    name = "userns"
    signals_as_exit_codes = True
    # The view helper mounts each overlay inside its user namespace.
    overlay_xattrs: OverlayXattrs = "user"

    def __init__(self) -> None:
        if _LIBC is None:
            raise ContainmentUnavailable("user and PID namespaces need Linux")
        unshare = shutil.which("unshare")
        init = shutil.which("timeout")
        if unshare is None or init is None:
            raise ContainmentUnavailable("util-linux unshare or coreutils timeout is not on PATH")
        super().__init__()
        self._prefix = [
            *(unshare, "--user", "--map-current-user", "--pid", "--fork", "--kill-child"),
            *("--", init, "--", "0"),
        ]
        try:
            probe = subprocess.run(
                [*self._prefix, "true"], capture_output=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise ContainmentUnavailable(f"cannot run unshare: {error}") from None
        if probe.returncode != 0:
            reason = probe.stderr.decode(errors="replace").strip() or f"exit {probe.returncode}"
            raise ContainmentUnavailable(f"unprivileged user namespaces refused: {reason}")

        #: Builds views inside a user namespace (None: actions get none).
        self._views: ViewHelper | None = None
        #: first pid -> the helper's descriptor of its view
        self._view_of: dict[int, int] = {}
        self._pending = threading.local()
        nsenter = shutil.which("nsenter")
        if nsenter is not None:
            helper = ViewHelper(unshare, nsenter)
            try:
                helper.start()
            except OSError as error:
                log.warning("containment userns: actions get no view of their own (%s)", error)
            else:
                self._views = helper
                self.can_view = True
        self._inner = [init, "--", "0"]

    def command(self, argv: Sequence[str], *, view: bool = False) -> list[str]:
        if view and self._views is not None:
            inner = self._views.inner(os.geteuid(), os.getegid())
            return [*inner, *self._inner, *argv]
        return [*self._prefix, *argv]

    @contextmanager
    def spawn_context(self, options: SpawnOptions) -> Iterator[list[str]]:
        if options.view is None or self._views is None:
            yield []
            return
        fd = self._views.build(options.view)
        self._pending.fd = fd
        try:
            yield self._views.enter(fd, options.cwd)
        except BaseException:
            self._pending.fd = None
            self._views.release(fd)
            raise

    def spawn_started(self, pid: int) -> None:
        super().spawn_started(pid)
        fd = getattr(self._pending, "fd", None)
        if fd is not None:
            self._pending.fd = None
            self._view_of[pid] = fd

    def _forget_view(self, pid: int) -> None:
        fd = self._view_of.pop(pid, None)
        if fd is not None and self._views is not None:
            self._views.release(fd)

    def spawn_abandoned(self, pid: int) -> None:
        self._forget_view(pid)
        super().spawn_abandoned(pid)

    def signal_action(self, pid: int, sig: int) -> None:
        _killpg(pid, sig)

    def end(self, pid: int, *, killed: bool = False) -> bool:
        self._forget_view(pid)
        self.guardian.remove(pid)
        return not killed


# --------------------------------------------------------------------------- portable


class ProcessGroupSweep(Containment):
    """Session per action, lre as subreaper, orphans swept at each action's end."""

    name = "portable"

    def __init__(self) -> None:
        super().__init__()
        #: first pid -> its start time (clock ticks since boot), running actions
        self._running: dict[int, int] = {}
        #: orphans left alive because a running action may own them
        self._kept: set[int] = set()
        self._lock = threading.Lock()
        self._subreaper = False
        if _LIBC is not None:
            try:
                _call("prctl", _PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
                self._subreaper = True
            except OSError as error:
                log.warning("cannot make lre a child subreaper (%s); orphans escape", error)
        self._main_children = f"/proc/self/task/{threading.main_thread().native_id}/children"

    def command(self, argv: Sequence[str], *, view: bool = False) -> list[str]:
        return list(argv)

    def spawn_started(self, pid: int) -> None:
        super().spawn_started(pid)
        fields = _stat_fields(pid)
        with self._lock:
            self._running[pid] = fields[1] if fields is not None else 0

    def spawn_abandoned(self, pid: int) -> None:
        with self._lock:
            self._running.pop(pid, None)
        super().spawn_abandoned(pid)

    def signal_action(self, pid: int, sig: int) -> None:
        _killpg(pid, sig)

    def action_roots(self) -> list[int]:
        # An orphan re-parented to lre is listed within ``watch``'s interval;
        # until then it is one of the main thread's children.
        roots = super().action_roots()
        with self._lock:
            running = bool(self._running)
        if running:
            guardian = self.guardian.pid
            roots.extend(p for p in self.orphans() if p != guardian and p not in roots)
        return roots

    def orphans(self) -> list[int]:
        """Processes re-parented to lre (children of its main thread)."""
        if not self._subreaper:
            return []
        try:
            with open(self._main_children, "rb") as handle:
                return [int(p) for p in handle.read().split()]
        except OSError:
            return []

    def end(self, pid: int, *, killed: bool = False) -> bool:
        # The zombie leader keeps the group id reserved: kill what is left in it.
        _killpg(pid, signal.SIGKILL)
        with self._lock:
            mine = self._running.pop(pid, 0)
            others = sorted(self._running.values())
        self.guardian.remove(pid)
        alone = True
        # A killed orphan's own children become orphans in turn: sweep again
        # until a pass kills nothing (a fork bomb that outruns this is
        # reported as not alone).
        for _ in range(_SWEEP_PASSES):
            killed = False
            for orphan in self.orphans():
                fields = _stat_fields(orphan)
                if fields is None:
                    continue
                state, born = fields
                if state == "Z":  # an orphan that exited on its own
                    self._forget(orphan)
                    _reap(orphan)
                    continue
                if born < mine and orphan not in self._kept:
                    continue  # older than this action: not its own
                if any(start <= born for start in others):
                    if born >= mine:
                        alone = False  # it may be ours, and it lives on
                    if orphan not in self._kept:
                        self._kept.add(orphan)
                        self.guardian.add_process(orphan)
                    continue
                _killpg(orphan, signal.SIGKILL)
                _kill(orphan, signal.SIGKILL)
                self._forget(orphan)
                _reap(orphan)  # SIGKILL cannot be ignored: this returns promptly
                killed = True
            if not killed:
                return alone
        return False

    async def watch(
        self,
        interval: float = 0.25,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """List every orphan of a running action with the guardian as soon as
        it appears (checked every ``interval`` seconds), so that it dies with
        lre even before its action ends, and reap orphans that exited. Runs
        until cancelled."""
        task_status.started()
        while True:
            await trio.sleep(interval)
            with self._lock:
                if not self._running:
                    continue
                earliest = min(self._running.values())
            for orphan in self.orphans():
                fields = _stat_fields(orphan)
                if fields is not None and fields[0] == "Z":  # exited: reap it now
                    self._forget(orphan)
                    _reap(orphan)
                    continue
                if orphan in self._kept or fields is None or fields[1] < earliest:
                    continue
                self._kept.add(orphan)
                self.guardian.add_process(orphan)

    def _forget(self, orphan: int) -> None:
        if orphan in self._kept:
            self._kept.discard(orphan)
            self.guardian.remove_process(orphan)


# --------------------------------------------------------------------------- choice


def choose_containment(mode: str) -> Containment:
    """The backend for ``mode`` (one of ``CONTAINMENT_MODES``).

    ``"strongest"`` takes the first of ``pidns``, ``userns`` and ``portable``
    that works here (logging why the others do not). ``"strict"`` is the same
    without ``portable``: where the kernel refuses both namespace backends it
    raises ``ContainmentUnavailable`` naming the missing protections and the
    kernel settings that refuse them (``_protections.py``). A named mode that
    cannot work raises ``ContainmentUnavailable``.
    """
    if mode not in CONTAINMENT_MODES:
        raise ValueError(f"containment: {mode!r} is not one of {', '.join(CONTAINMENT_MODES)}")
    candidates: list[type[Containment]] = [PidNamespace, UserNamespace]
    reasons: list[str] = []
    for backend in candidates:
        if mode not in ("strongest", "strict", backend.name):
            continue
        try:
            return backend()
        except ContainmentUnavailable as error:
            if mode == backend.name:
                raise
            reasons.append(f"{backend.name}: {error}")
            log.info("containment: %s unavailable (%s)", backend.name, error)
    if mode == "strict":
        raise ContainmentUnavailable(
            "'strict' needs a PID namespace per action and the kernel refuses both ways to "
            f"make one ({'; '.join(reasons)}); missing: "
            f"{'; '.join(missing_protections('portable'))}"
            + "".join(f"; {refusal}" for refusal in namespace_refusals())
        )
    return ProcessGroupSweep()
