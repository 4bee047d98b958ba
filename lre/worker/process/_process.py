"""Running one action's process tree and making sure none of it survives.

``run_process`` starts the command in a new session (so its own process
group), with stdin from /dev/null and stdout/stderr written to files, inside
the worker's ``Containment`` (``_containment.py``: a PID namespace per action,
or the portable process-group sweep), which decides how the process is
started, how it is signalled and what is killed when it ends.

Processes are started by a few spawner threads that live as long as lre
(``_Spawner``): opening the log files and forking block until the child has
exec'd, which on a busy machine takes tens of milliseconds that must not
stall the event loop; a parent-death signal follows the *thread* that
forked, so that thread must never exit while lre runs (Trio's worker threads
come and go, which is why they are not used here); and a namespace made for
a child is the spawning thread's own setting, never shared with another
thread's fork.

When the first process exits, the containment ends the action (``end``:
with a PID namespace the kernel has already killed the rest; otherwise the
group is SIGKILLed before the leader is reaped, while its zombie keeps the
group id reserved, and orphans are swept). On timeout or cancellation the
action gets SIGTERM, then SIGKILL after ``kill_grace`` seconds, and is
reaped the same way.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import logging
import os
import queue
import shutil
import signal
import stat
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from lre.errors import InvalidArgument
from lre.upstream import name_os_thread
from lre.worker.containment import (
    WRAPPER_LABEL,
    ActionIdentity,
    ActionLaunch,
    Containment,
    SpawnOptions,
    choose_containment,
    prepare_spawner_thread,
)
from lre.worker.process._open_files import action_open_files, limit_open_files
from lre.worker.process._process_limit import process_limits
from lre.worker.usage import OomCounters, open_report, own_image, read_report
from lre.worker.view import ActionView, WritableRefused

log = logging.getLogger(__name__)

_DEFAULT: list[Containment] = []
_DEFAULT_LOCK = threading.Lock()


def default_containment() -> Containment:
    """The ``strongest`` backend, chosen once per process (for callers that do not
    pass their own, such as tests and benches running ``run_process`` alone)."""
    with _DEFAULT_LOCK:
        if not _DEFAULT:
            _DEFAULT.append(choose_containment("strongest"))
        return _DEFAULT[0]


#: Programs that read their argv[0] to choose how they behave: bash run as
#: ``sh`` is POSIX (it reads no ``BASH_ENV``); busybox picks its applet. A
#: pidns view's gate is a shell, so it keeps its name.
_NAME_MATTERS = frozenset({"sh", "dash", "bash", "ash", "ksh", "mksh", "zsh", "busybox"})


def _labelled(first: list[str], *, wrapped: bool) -> list[str]:
    """``first`` with argv[0] replaced by ``WRAPPER_LABEL`` when it is a
    wrapper (``wrapped``: GNU time, coreutils timeout, util-linux unshare or
    nsenter, which read argv[0] only for their own error messages) and not a
    program whose behaviour hangs on its name (``_NAME_MATTERS``, by the
    file it resolves to). The program run is still ``first[0]`` (Popen's
    ``executable``)."""
    if not wrapped or _name_matters(first[0]):
        return first
    return [WRAPPER_LABEL, *first[1:]]


@functools.lru_cache(maxsize=64)
def _name_matters(wrapper: str) -> bool:
    """Whether the wrapper program ``wrapper`` (by its own name or the file
    it resolves to) is one of ``_NAME_MATTERS``. Asked once per program, not
    per action: the wrappers are the few programs the backends chose at
    start-up, and resolving one walks its path a system call per component."""
    program = os.path.basename(os.path.realpath(wrapper))
    return program in _NAME_MATTERS or os.path.basename(wrapper) in _NAME_MATTERS


def _resolve_program(program: str, cwd: Path, env: Mapping[str, str]) -> str:
    """The path ``program`` executes, as execvp would find it.

    Raises ``InvalidArgument`` naming ``program`` when nothing executable is
    found, so a typo is a clear error rather than exit code 127.
    """
    if "/" in program:
        path = program if program.startswith("/") else os.path.join(cwd, program)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath))
        if found is not None:
            return found if os.path.isabs(found) else os.path.join(cwd, found)
    raise InvalidArgument(
        f"Command.arguments[0]: {program!r} is not an executable file "
        f"(working directory {cwd.name!r}, PATH {env.get('PATH', '')!r})"
    )


@dataclass(frozen=True, slots=True)
class ProcessOutcome:
    """How an action's process ended.

    ``exit_code`` is the leader's exit status, or ``128 + signal`` when it
    was killed by a signal (``signal`` then names it). ``timed_out`` is true
    when lre killed it for exceeding its timeout; ``oom_killed`` when it died
    of a SIGKILL lre did not send while the kernel's OOM-kill counter grew.
    ``cpu_seconds`` and ``max_rss_bytes`` come from the leader's rusage
    (including descendants it waited for); ``max_rss_bytes`` is the kernel's
    figure as it is, which carries lre's own image (``_own_image.py``):
    ``own_image_bytes`` bounds that image. ``tree_peak_bytes`` is the
    figure pid 1 reported for the command's tree (``_tree_peak``; 0: none).
    ``kernel_peak_bytes`` is the larger of the two that are the action's own.
    ``ended_alone`` is true when
    nothing the action started can still run (see ``Containment.end``): only
    then may its directory be reused and its files moved into the CAS.
    """

    exit_code: int
    signal: int | None
    timed_out: bool
    oom_killed: bool
    started_at: float
    ended_at: float
    cpu_seconds: float
    max_rss_bytes: int
    ended_alone: bool = True
    #: lre's own image the kernel figure may carry (bytes; 0: unknown,
    #: the figure is then not the action's, see ``kernel_peak_bytes``).
    own_image_bytes: int = 0
    #: the kernel's figure of the command's tree, as pid 1 reported it
    #: (bytes; 0: no report, ``_tree_peak``)
    tree_peak_bytes: int = 0
    #: (device, inode) of the stdout and stderr files lre opened for the
    #: action, so that a file the action put in their place is noticed.
    log_files: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0))

    @property
    def kernel_peak_bytes(self) -> int:
        """The kernel's figure of the largest process of the action's reaped
        tree: pid 1's report of the command's tree, or lre's own ``wait4``
        when it is above lre's image (the larger when both are known); 0
        when neither is known (no report, and the action's processes stayed
        below lre's image)."""
        own = 0
        if self.own_image_bytes and self.max_rss_bytes > self.own_image_bytes:
            own = self.max_rss_bytes
        return max(own, self.tree_peak_bytes)

    @property
    def describe(self) -> str:
        if self.timed_out:
            return "killed after exceeding its timeout"
        if self.oom_killed:
            return "killed by the kernel's out-of-memory killer"
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            return f"killed by {name}"
        return f"exited with code {self.exit_code}"


_OOM = OomCounters()


#: Threads that start action processes (a spawn blocks its thread until the
#: child has exec'd; two in parallel keep a busy machine's scheduling latency
#: from serialising every start; more contend for the GIL with the event loop
#: and cost more CPU than they save).
SPAWNER_THREADS = 2


class _Spawner:
    """Long-lived daemon threads that run process-starting jobs.

    They are started on first use and never stopped, so the parent-death
    signal of a child (tied to the thread that forked it) fires only when lre
    itself dies. Each thread first sets its own niceness to ``nice`` (Linux
    keeps niceness per thread and a forked child inherits its thread's), so
    every process it starts begins at that niceness, before its first
    instruction, with no extra exec and no window in which it could fork at
    lre's priority.
    """

    def __init__(self, threads: int, nice: int = 0) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._wanted = threads
        self._nice = nice
        self._lock = threading.Lock()

    @property
    def threads(self) -> tuple[threading.Thread, ...]:
        return tuple(self._threads)

    def _start_threads(self) -> None:
        with self._lock:
            while len(self._threads) < self._wanted:
                thread = threading.Thread(
                    target=self._serve, name=f"lre-spawner-{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _serve(self) -> None:
        name_os_thread(threading.current_thread().name)
        prepare_spawner_thread()
        if self._nice:
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self._nice)
            except OSError as error:  # raising niceness is always allowed; be safe anyway
                log.warning("cannot set niceness %d for action processes: %s", self._nice, error)
        while True:
            self._jobs.get()()

    async def spawn(
        self,
        start: Callable[[], tuple[subprocess.Popen[bytes], int, tuple[int, ...]]],
        containment: Containment,
    ) -> tuple[subprocess.Popen[bytes], int, tuple[int, ...]]:
        """Run ``start`` (returns the Popen, its pidfd and the OOM counters)
        in a spawner thread and return what it returned, or raise what it raised.

        Not cancellable while the job runs (a process started meanwhile must
        be supervised and killed by the caller); cancellation is seen at the
        caller's next checkpoint. If the Trio run is gone by the time the
        process started, the thread kills the action and reaps it.
        """
        if len(self._threads) < self._wanted:
            self._start_threads()
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        box: list[object] = []

        def deliver(result: object) -> None:
            box.append(result)
            done.set()

        def job() -> None:
            result: object
            try:
                result = start()
            except BaseException as error:  # handed to the waiting task
                result = error
            try:
                token.run_sync_soon(deliver, result)
            except trio.RunFinishedError:
                if isinstance(result, tuple):  # nobody left to supervise it
                    popen, pidfd, _ = result
                    containment.signal_action(popen.pid, signal.SIGKILL)
                    containment.spawn_abandoned(popen.pid)
                    os.close(pidfd)
                    popen.wait()

        self._jobs.put(job)
        with trio.CancelScope(shield=True):
            await done.wait()
        (result,) = box
        if isinstance(result, BaseException):
            raise result
        return result  # type: ignore[return-value]


_SPAWNER = _Spawner(SPAWNER_THREADS)
_SPAWNERS: dict[int, _Spawner] = {0: _SPAWNER}


def _spawner_for(nice: int) -> _Spawner:
    """The spawner whose threads start processes at niceness ``nice``."""
    spawner = _SPAWNERS.get(nice)
    if spawner is None:
        spawner = _SPAWNERS[nice] = _Spawner(SPAWNER_THREADS, nice)
    return spawner


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    """One action's process as ``run_process`` starts and watches it.

    ``argv`` runs in ``cwd`` with exactly ``env``, stdin from /dev/null and
    its output in new files at ``stdout_path`` and ``stderr_path``; it is
    ended after ``timeout`` seconds (SIGTERM, then SIGKILL ``kill_grace``
    seconds later). ``pass_fds`` stay open in it (a jobserver's pipe).
    The other fields and the four hooks are described at ``run_process``.
    """

    argv: Sequence[str]
    cwd: Path
    env: Mapping[str, str]
    stdout_path: Path
    stderr_path: Path
    timeout: float
    kill_grace: float
    pass_fds: Sequence[int] = ()
    nice: int = 0
    containment: Containment | None = None
    block_network: bool = False
    view: ActionView | None = None
    max_processes: int = 0
    max_open_files: int = 0
    identity: ActionIdentity | None = None
    on_started: Callable[[int], None] | None = None
    paused_seconds: Callable[[], float] | None = None
    end_frozen: Callable[[], bool] | None = None
    on_view_held: Callable[[int], None] | None = None


async def run_process(request: SpawnRequest) -> ProcessOutcome:
    """Run ``request.argv`` to completion, timeout or cancellation.

    ``on_view_held(fd)`` (optional, with a ``view``) is handed, once the
    action ended (however: cancellation included), a descriptor of the mount
    namespace the action ran in, where the containment kept it open
    (``Containment.held_view``): the caller owns it and closes it later, in a
    thread, since that close tears the view down (unmounts, an RCU grace
    period); lre then does not wait for that in the action's exit. Without
    it the view goes with the action's last process, as before.

    ``paused_seconds()`` (optional) says how long the action has been frozen
    so far; that time is added to ``timeout`` (a frozen action never times out).
    ``end_frozen()`` (optional) is called when lre ends the run (cancellation,
    timeout): it returns True when the action was frozen and has been killed
    and thawed (``MemoryControl.end_frozen``); then no SIGTERM and no kill
    grace are spent on it, since a frozen process acts on neither.

    The process starts at niceness ``nice`` (0-19; see ``_Spawner``), inside
    ``containment`` (default: ``default_containment()``), without network
    when ``block_network`` (raises ``InvalidArgument`` when the containment
    cannot do that), in ``view`` (its own mount namespace, ``_view.py``;
    raises ``InvalidArgument`` when the containment cannot make one), with at
    most ``max_processes`` tasks at once where this machine lets lre enforce
    that (0 = no limit; ``_process_limit.py``: the caller asks
    ``process_limits().ended(pid)`` whether a fork was refused), and
    ``max_open_files`` as its ``RLIMIT_NOFILE`` (0 = lre's own;
    ``_open_files.py``).

    With ``identity`` the command's own processes run as that user, with
    no supplementary groups and no capabilities (``_identity.py``); the
    namespace's first process stays lre's. Without one, a root lre's action
    in a view keeps uid 0 but only ``_capabilities.ALLOWED`` where the
    containment can (``Containment.root_actions_missing`` says where not).

    ``on_started(pid)`` is called right after the fork (the pid is also the
    process group id). Returns a ``ProcessOutcome`` for normal ends and
    timeouts. On cancellation the group is terminated and reaped (shielded)
    and ``trio.Cancelled`` propagates. Raises ``InvalidArgument`` when the
    arguments and environment exceed the kernel's limit (E2BIG), or when the
    program cannot be executed (not found, not executable), naming argv[0].
    """
    argv, cwd, env, identity = request.argv, request.cwd, request.env, request.identity
    view, pass_fds = request.view, request.pass_fds
    contained = request.containment if request.containment is not None else default_containment()
    if request.block_network and not contained.can_block_network:
        raise InvalidArgument(
            "Platform property block-network: this lre runs actions with containment "
            f"{contained.name!r}, which cannot take an action's network away"
        )
    if view is not None and not contained.can_view:
        raise InvalidArgument(
            f"this lre runs actions with containment {contained.name!r}, which cannot "
            "give an action a view of its own"
        )
    if not 0 <= request.nice <= 19:
        raise ValueError(f"nice: {request.nice} is not in 0..19")
    #: where pid 1 reports the command tree's peak (``_tree_peak``)
    report = _open_peak_report(contained)
    limits = process_limits()
    open_files = action_open_files(request.max_open_files)
    command = limits.command(
        contained.name,
        contained.command(
            ActionLaunch(
                [*identity.prefix(), *argv] if identity is not None else argv,
                view=view is not None,
                pwd=env.get("PWD"),
                keep_fds=tuple(pass_fds),
                peak_report=report,
            )
        ),
        request.max_processes,
        open_files,
    )
    options = SpawnOptions(
        block_network=request.block_network,
        view=view,
        cwd=str(cwd),
        hold_view=view is not None and request.on_view_held is not None,
        drop_root_privileges=identity is None,
    )
    environment = dict(env)
    log_files: list[tuple[int, int]] = []
    #: the bound of lre's image in the first process's kernel figure
    image: list[int] = []
    fds = tuple(pass_fds) if report is None else (*pass_fds, report)

    helpers = contained.helper_processes

    def start() -> tuple[subprocess.Popen[bytes], int, tuple[int, ...]]:
        # Runs in a spawner thread (see the module docstring).
        _resolve_program(argv[0], cwd, env)  # a clear error instead of exit 127
        stdout_fd = _open_log(request.stdout_path)
        try:
            stderr_fd = _open_log(request.stderr_path)
            try:
                for fd in (stdout_fd, stderr_fd):
                    info = os.fstat(fd)
                    log_files.append((info.st_dev, info.st_ino))
                oom_before = _OOM.read_recent()
                # Before the thread sits in any action's cgroup (the first
                # spawn starts it; later calls do nothing).
                contained.guardian.start()
                # The child runs before ``spawn_started`` lists it: until then
                # the guardian knows it by its stdout (``start_listed`` ends it).
                contained.guardian.spawning(stdout_fd)
                try:
                    # The cgroup first: once the view is built, the spawner
                    # thread's own /sys is read-only.
                    with (
                        limits.around_fork(request.max_processes),
                        contained.spawn_context(options) as prefix,
                    ):
                        own = own_image()
                        own.before_spawn()
                        try:
                            first = [*prefix, *command]
                            popen = subprocess.Popen(
                                _labelled(first, wrapped=bool(prefix) or helpers > 0),
                                executable=first[0],
                                cwd=cwd,
                                env=environment,
                                stdin=contained.spawn_stdin(),
                                stdout=stdout_fd,
                                stderr=stderr_fd,
                                close_fds=True,
                                pass_fds=fds,
                                start_new_session=True,
                            )
                        finally:
                            image.append(own.after_spawn())
                        # Before the gate of a view opens (spawn_context).
                        limit_open_files(popen.pid, open_files)
                    limits.started(popen.pid)
                except WritableRefused:  # named by the runner (it knows the property)
                    limits.abandoned()
                    raise
                except (FileNotFoundError, PermissionError, NotADirectoryError) as error:
                    limits.abandoned()
                    raise InvalidArgument(
                        f"Command.arguments[0]: {argv[0]!r} cannot be executed: {error.strerror}"
                    ) from None
                except OSError as error:
                    limits.abandoned()
                    if error.errno != errno.E2BIG:
                        raise
                    raise InvalidArgument(
                        f"Command.arguments: {len(argv)} arguments of "
                        f"{sum(len(a) + 1 for a in argv)} bytes (with "
                        f"{len(environment)} environment variables) exceed the "
                        "system's limit on a command line"
                    ) from None
            finally:
                os.close(stderr_fd)
        finally:
            os.close(stdout_fd)
        contained.spawn_started(popen.pid)
        try:
            pidfd = os.pidfd_open(popen.pid)
        except BaseException:
            contained.signal_action(popen.pid, signal.SIGKILL)
            contained.spawn_abandoned(popen.pid)
            popen.wait()
            raise
        return popen, pidfd, oom_before

    def start_listed() -> tuple[subprocess.Popen[bytes], int, tuple[int, ...]]:
        try:
            return start()
        finally:
            contained.guardian.spawned()  # listed, or never started

    try:
        popen, pidfd, oom_before = await _spawner_for(request.nice).spawn(start_listed, contained)
        logs = (log_files[0], log_files[1])
        outcome = await _supervise(request, contained, popen, pidfd, oom_before, logs)
        # pid 1 was reaped: it wrote its report, if it ever will
        tree_peak = read_report(report) if report is not None else 0
    finally:
        if report is not None:
            os.close(report)
    return dataclasses.replace(
        outcome, own_image_bytes=image[0] if image else 0, tree_peak_bytes=tree_peak
    )


def _open_peak_report(contained: Containment) -> int | None:
    """A report file for pid 1's tree peak where the backend has one
    (``_tree_peak``), else None; None too (logged) when it cannot be made:
    the run then has lre's own ``wait4`` only."""
    if contained.peak_tool is None:
        return None
    try:
        return open_report()
    except OSError as error:
        log.warning("no tree peak report for an action: %s", error)
        return None


def _open_log(path: Path) -> int:
    """(spawner thread) A new, empty regular file at ``path`` for a log.

    Whatever else is there (a symlink or FIFO an action planted without a
    view of its own, a hardlink to another file) is unlinked, never
    followed or truncated. Raises ``OSError`` when that fails.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.unlink(path)
            flags |= os.O_EXCL
    return os.open(path, flags, 0o600)


async def _supervise(
    request: SpawnRequest,
    containment: Containment,
    popen: subprocess.Popen[bytes],
    pidfd: int,
    oom_before: tuple[int, ...],
    log_files: tuple[tuple[int, int], tuple[int, int]],
) -> ProcessOutcome:
    """Wait for the started leader ``popen`` (``pidfd``: its pidfd) to end,
    its timeout or cancellation (then ``_terminate``), end the action through
    ``containment`` and reap the leader; cancellation propagates after that."""
    started_at = trio.current_time()
    pid, paused_seconds, end_frozen = popen.pid, request.paused_seconds, request.end_frozen
    timeout, kill_grace, on_started = request.timeout, request.kill_grace, request.on_started
    timed_out = False
    we_killed = False
    status = 0
    rusage = None
    try:
        if on_started is not None:
            on_started(pid)
        try:
            while True:
                paused = paused_seconds() if paused_seconds is not None else 0.0
                left = started_at + timeout + paused - trio.current_time()
                with trio.move_on_after(max(0.0, left)) as scope:
                    await trio.lowlevel.wait_readable(pidfd)
                if not scope.cancelled_caught:
                    break
                if paused_seconds is None or paused_seconds() <= paused:
                    break  # no new frozen time: the timeout is reached
            if scope.cancelled_caught:
                timed_out = True
                we_killed = True
                await _terminate(containment, pid, pidfd, kill_grace, end_frozen)
        except BaseException:
            we_killed = True
            with trio.CancelScope(shield=True):
                await _terminate(containment, pid, pidfd, kill_grace, end_frozen)
            raise
    finally:
        # The leader has exited, or was sent SIGKILL and is waited for here
        # (promptly), so that its children are orphans by the time the
        # containment ends the action; not reaped yet, so its ids still
        # belong to this action.
        if we_killed:
            with trio.CancelScope(shield=True):
                await trio.lowlevel.wait_readable(pidfd)
        ended_alone = containment.end(pid, killed=we_killed)
        held = containment.held_view(pid)
        if held is not None:
            if request.on_view_held is not None:
                request.on_view_held(held)
            else:  # not asked for (no backend holds one unasked)
                os.close(held)
        _, status, rusage = _reap(pid, pidfd)
        popen.returncode = os.waitstatus_to_exitcode(status)
    ended_at = trio.current_time()
    term_signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    exit_code = 128 + term_signal if term_signal is not None else os.WEXITSTATUS(status)
    if term_signal is None and containment.signals_as_exit_codes and 128 < exit_code < 160:
        term_signal = exit_code - 128  # the init's report of its child's signal
    oom = (
        term_signal == signal.SIGKILL
        and not we_killed
        and OomCounters.grew(oom_before, _OOM.read())
    )
    return ProcessOutcome(
        exit_code=exit_code,
        signal=term_signal,
        timed_out=timed_out,
        oom_killed=oom,
        started_at=started_at,
        ended_at=ended_at,
        cpu_seconds=rusage.ru_utime + rusage.ru_stime,
        max_rss_bytes=rusage.ru_maxrss * 1024,
        ended_alone=ended_alone,
        log_files=log_files,
    )


async def _terminate(
    containment: Containment,
    pid: int,
    pidfd: int,
    kill_grace: float,
    end_frozen: Callable[[], bool] | None = None,
) -> None:
    """SIGTERM the action, wait up to ``kill_grace`` for the leader, SIGKILL
    it; a frozen action (``end_frozen()`` True) is sent SIGKILL at once."""
    if end_frozen is not None and end_frozen():
        containment.signal_action(pid, signal.SIGKILL)
        return
    containment.signal_action(pid, signal.SIGTERM)
    with trio.move_on_after(kill_grace):
        await trio.lowlevel.wait_readable(pidfd)
    containment.signal_action(pid, signal.SIGKILL)


def _reap(pid: int, pidfd: int) -> tuple[int, int, os.struct_rusage]:  # type: ignore[name-defined]
    """Wait for the (killed or exited) leader and close its pidfd."""
    try:
        trio.lowlevel.notify_closing(pidfd)
    except RuntimeError:
        pass
    os.close(pidfd)
    while True:
        try:
            return os.wait4(pid, 0)
        except InterruptedError:
            continue
