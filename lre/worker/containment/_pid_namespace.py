"""``PidNamespace``: the ``"pidns"`` containment backend, one PID namespace
per action made by the spawner thread itself (see ``_containment.py``)."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from lre.worker.containment._action_dns import FORWARDER
from lre.worker.containment._action_network import OutsideNetwork, make_network_namespace
from lre.worker.containment._capabilities import root_lock_refusal, without_root_privileges
from lre.worker.containment._containment_base import (
    CLONE_FS,
    ActionLaunch,
    Containment,
    ContainmentUnavailable,
    SpawnOptions,
)
from lre.worker.containment._syscalls import LIBC as _LIBC
from lre.worker.containment._syscalls import call as _call
from lre.worker.containment._syscalls import kill as _kill
from lre.worker.containment._syscalls import killpg as _killpg
from lre.worker.containment._syscalls import loopback_up as _loopback_up
from lre.worker.containment._throwaway_thread import failure_in_throwaway_thread
from lre.worker.usage import peak_tool
from lre.worker.view import build_view, mount_children_proc, proc_pidns_works

log = logging.getLogger(__name__)

_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWPID = 0x20000000
#: The first process of a view whose /proc the spawner mounts: it waits for
#: ``go`` on its stdin (lre's end of a pipe), 125 when lre did not say
#: ``go``. Its first argument restores the action's own PWD, which sh would
#: otherwise set and export: "-" (the action has none) or "=" + its value.
#: Then it stays pid 1 and runs the rest of its arguments as its child, in a
#: subshell that executes them (``exec``: a program from PATH even where sh
#: has a builtin of that name, argv[0] as given), and exits with the
#: child's status (128 + the signal that killed it). Its own stdin becomes
#: /dev/null first, so neither it nor the command keeps the gate's pipe.
#: This is the role ``timeout 0`` has elsewhere, one exec fewer per action;
#: where GNU time reports the command's tree (``_tree_peak``), the gate
#: executes time in that role instead (``_PROC_GATE``).
#: sh's own stderr goes to /dev/null (a shell reports a child killed by a
#: signal, "Terminated", and that line is no part of the action's stderr);
#: the command gets the real one back from descriptor {spare}, which the
#: action is not handed (``_spare_descriptor``).
_PROC_GATE_PID1 = (
    'IFS= read -r gate; [ "$gate" = go ] || exit 125; '
    "case $1 in -) unset PWD ;; *) PWD=${{1#=}}; export PWD ;; esac; shift; "
    'exec {spare}>&2 2>/dev/null </dev/null; (exec "$@") 2>&{spare} {spare}>&-'
)
#: The same gate executing the rest of its arguments (GNU ``time`` or
#: ``timeout``, then pid 1): with a tree peak report, or where no descriptor
#: from 3 to 9 is free for ``_PROC_GATE_PID1``. pid 1 then writes nothing
#: to stderr of its own (``time -q``; ``timeout`` only on failure to run).
_PROC_GATE = (
    'IFS= read -r gate; [ "$gate" = go ] || exit 125; '
    "case $1 in -) unset PWD ;; *) PWD=${1#=}; export PWD ;; esac; shift; "
    'exec "$@" </dev/null'
)


def _spare_descriptor(keep: Sequence[int]) -> int | None:
    """A descriptor number from 3 to 9 (the ones sh redirects) that the
    action is not handed (``keep``: its ``pass_fds``), or None."""
    for number in range(3, 10):
        if number not in keep:
            return number
    return None


class _SharedNetwork:
    """The network namespace every pidns action of this process runs in
    (``_action_network``), made on first use and kept for the process's
    life: one per lre, however many backends it builds, and one
    ``slirp4netns`` beside it."""

    _lock = threading.Lock()
    _made: tuple[int, OutsideNetwork] | None = None

    @classmethod
    def get(cls) -> tuple[int, OutsideNetwork]:
        """The namespace's descriptor and its outside stack; raises
        ``OSError`` when the namespace cannot be made."""
        with cls._lock:
            if cls._made is None:
                fd = make_network_namespace()
                outside = OutsideNetwork()
                outside.start(["--netns-type=path", f"/proc/self/fd/{fd}"], pass_fds=(fd,))
                atexit.register(outside.close)
                cls._made = (fd, outside)
            return cls._made


def _open_namespace() -> int | None:
    """(spawner thread, in the view) A descriptor of the calling thread's
    mount namespace, or None when it cannot be opened (logged: the view is
    then torn down in the action's exit, as without holding)."""
    try:
        return os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        log.warning("containment pidns: cannot hold the action's view (%s)", error)
        return None


class PidNamespace(Containment):
    """One PID namespace per action (see the module docstring).

    Raises ``ContainmentUnavailable`` when this process may not make PID
    namespaces (it needs CAP_SYS_ADMIN) or coreutils ``timeout`` (the
    namespace's first process) is missing.
    """

    name = "pidns"
    can_block_network = True
    hides_listeners = True
    ends_alone = True
    # the gate sh, GNU time or ``timeout``: pid 1, the action's command is its child
    helper_processes = 1
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
        #: GNU time as pid 1 where it reports the command's tree (_tree_peak)
        self.peak_tool = peak_tool()
        #: POSIX sh: the gate of a view whose /proc the spawner mounts
        #: (None: the kernel cannot, or no sh; then util-linux unshare
        #: mounts each view's /proc, see _view.py)
        sh = shutil.which("sh")
        self._gate_sh = sh if sh is not None and proc_pidns_works() else None
        self._unshare = shutil.which("unshare")
        self._own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self._own_net_ns = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self._own_mnt_ns = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        try:
            #: Where every action runs unless it blocks the network: lre's
            #: listeners are not there (``_action_network``).
            self._action_net, self.outside = _SharedNetwork.get()
        except OSError as error:
            raise ContainmentUnavailable(
                f"cannot make the actions' network namespace ({error}); it needs CAP_SYS_ADMIN"
            ) from None
        #: per spawner thread: the read end of the running spawn's gate, and
        #: the view's namespace held for the spawn just made (``view``)
        self._gate = threading.local()
        #: first pid -> the held mount namespace of its view (``held_view``)
        self._held: dict[int, int] = {}
        self._probe()
        can_mount_proc = self._gate_sh is not None or self._unshare is not None
        self.can_view = can_mount_proc and self._probe_view()
        #: Why a root action in a view keeps every capability (None: it
        #: keeps only ``_capabilities.ALLOWED``; also None when lre is not root)
        self._root_unlocked = self._root_lock_refusal()
        if self._root_unlocked is not None:
            log.warning("containment pidns: %s", self._root_unlocked)

    def _root_lock_refusal(self) -> str | None:
        if os.geteuid() != 0 or not self.can_view:
            return None
        if self._gate_sh is None:
            # unshare --mount-proc, the first process, mounts the view's
            # /proc itself and needs CAP_SYS_ADMIN for it.
            return (
                "root actions keep every capability in their view (the kernel cannot mount "
                "a /proc for a named PID namespace, Linux 6.15+): they can unmount its masks"
            )
        refusal = root_lock_refusal()
        if refusal is None:
            return None
        return f"root actions keep every capability in their view ({refusal})"

    def network_missing(self) -> str | None:
        return self.outside.missing

    def dns_forwarder(self) -> str | None:
        return FORWARDER if self.outside.running else None

    def root_actions_missing(self) -> tuple[str, ...]:
        return () if self._root_unlocked is None else (self._root_unlocked,)

    def _probe_view(self) -> bool:
        """Whether a mount namespace can be made and left here (logged if not)."""

        def probe() -> None:
            _call("unshare", CLONE_FS)
            _call("unshare", _CLONE_NEWNS)
            _call("setns", self._own_mnt_ns, _CLONE_NEWNS)

        failure = failure_in_throwaway_thread("lre-view-probe", probe)
        if failure is not None:
            log.warning("containment pidns: actions get no view of their own (%s)", failure)
        return failure is None

    def _probe(self) -> None:
        """Make and leave one namespace in a throwaway thread, so that a
        missing privilege shows at start-up, not at the first action."""

        def probe() -> None:
            with self.spawn_context(SpawnOptions()):
                pass

        failure = failure_in_throwaway_thread("lre-pidns-probe", probe)
        if failure is not None:
            raise ContainmentUnavailable(
                f"cannot make a PID namespace ({failure}); it needs CAP_SYS_ADMIN"
            )

    def command(self, launch: ActionLaunch) -> list[str]:
        # pid 1 execvp()s argv with the action's PATH, argv[0] unchanged:
        # GNU time, which writes the peak of the command's tree to
        # ``peak_report`` (``_tree_peak``), or else timeout, whose duration
        # of 0 sets no limit. In a view, the gate waits for the spawner's
        # /proc, then executes that pid 1 (without a report, it runs argv
        # itself as pid 1 when it has a spare descriptor); without the gate,
        # unshare first mounts the namespace's own /proc.
        prefix = self.peak_prefix(launch.peak_report)
        argv = launch.argv
        init = [*prefix, *argv] if prefix is not None else [self._init, "--", "0", *argv]
        if launch.view and self._gate_sh is not None:
            own_pwd = "-" if launch.pwd is None else "=" + launch.pwd
            spare = _spare_descriptor(launch.keep_fds)
            if spare is None or prefix is not None:
                return [self._gate_sh, "-c", _PROC_GATE, "sh", own_pwd, *init]
            gate = _PROC_GATE_PID1.format(spare=spare)
            return [self._gate_sh, "-c", gate, "sh", own_pwd, *argv]
        if launch.view and self._unshare is not None:
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
        stale: int | None = getattr(self._gate, "view", None)
        if stale is not None:  # held for a spawn that then failed
            self._gate.view = None
            os.close(stale)
        _call("setns", self._own_pid_ns, _CLONE_NEWPID)
        _call("unshare", _CLONE_NEWPID)
        try:
            if options.view is not None:
                _call("unshare", _CLONE_NEWNS)
                try:
                    build_view(options.view, host_proc_writable=self._gate_sh is None)
                    # Before the action's /proc covers the host's (no
                    # /proc/thread-self there).
                    held = _open_namespace() if options.hold_view else None
                    locked = options.drop_root_privileges and self._root_unlocked is None
                    try:
                        with (
                            self._gated(read_only_proc=locked),
                            self._network(options),
                            self._without_root(locked),
                        ):
                            yield []
                    except BaseException:
                        if held is not None:
                            os.close(held)
                        raise
                    self._gate.view = held
                finally:
                    _call("setns", self._own_mnt_ns, _CLONE_NEWNS)
            else:
                with self._network(options):
                    yield []
        finally:
            _call("setns", self._own_pid_ns, _CLONE_NEWPID)

    def spawn_started(self, pid: int) -> None:
        super().spawn_started(pid)
        held: int | None = getattr(self._gate, "view", None)
        if held is not None:
            self._gate.view = None
            self._held[pid] = held

    def held_view(self, pid: int) -> int | None:
        return self._held.pop(pid, None)

    def spawn_abandoned(self, pid: int) -> None:
        held = self._held.pop(pid, None)
        if held is not None:
            os.close(held)
        super().spawn_abandoned(pid)

    @contextmanager
    def _without_root(self, locked: bool) -> Iterator[None]:
        """Around the fork of a root action when ``locked``: it keeps only
        ``_capabilities.ALLOWED``. A call that fails is logged, the action
        runs with every capability, and ``root_actions_missing`` says so
        from then on."""
        with ExitStack() as stack:
            if locked:
                try:
                    stack.enter_context(without_root_privileges())
                except OSError as error:
                    self._root_unlocked = (
                        f"root actions keep every capability in their view ({error})"
                    )
                    log.error("containment pidns: %s", self._root_unlocked)
            yield

    @contextmanager
    def _gated(self, *, read_only_proc: bool = False) -> Iterator[None]:
        """Around the fork of a view's first process: its gate (``spawn_stdin``),
        and once it was forked, the view's /proc mounted (read-only when
        ``read_only_proc``) and the gate opened. A /proc that cannot be
        mounted leaves the gate closed (logged)."""
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
                mount_children_proc(read_only=read_only_proc)
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
        """Around the fork: the thread in the actions' shared network
        namespace, or for ``block_network`` in a new one with only loopback
        (a new network stack: slow); back in lre's own after it."""
        try:
            if options.block_network:
                _call("unshare", _CLONE_NEWNET, release=True)
                _loopback_up()
            else:
                _call("setns", self._action_net, _CLONE_NEWNET)
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
