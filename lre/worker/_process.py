"""Running one action's process tree and making sure none of it survives.

``run_process`` starts the command in a new session (so its own process
group), with stdin from /dev/null and stdout/stderr written to files, and on
Linux with a parent-death signal (SIGKILL) so the leader dies if lre dies
(set by exec'ing through util-linux ``setpriv --pdeathsig KILL`` when it is
installed, else by a ``preexec_fn`` calling prctl).

Processes are started by a few spawner threads that live as long as lre
(``_Spawner``): opening the log files and forking block until the child has
exec'd, which on a busy machine takes tens of milliseconds that must not
stall the event loop; and the parent-death signal follows the *thread* that
forked, so that thread must never exit while lre runs (Trio's worker
threads come and go, which is why they are not used here).
When the leader exits the whole group is SIGKILLed before the leader is
reaped (its zombie keeps the group id reserved, so the signal cannot reach a
stranger), which kills anything it left running in the background. On
timeout or cancellation the group gets SIGTERM, then SIGKILL after
``kill_grace`` seconds, and is reaped the same way.

Processes that leave the group (``setsid``/``setpgid``) escape the group
kill; the sampler's process-tree view is the place to catch those.

If lre dies, the parent-death signal reaches only each leader; the process
guardian (``_guardian.py``), told of every group from its start until just
before its leader is reaped, SIGKILLs the groups still listed when lre is gone.

Parent-death window: through ``setpriv`` the parent-death signal is armed
only when setpriv runs, a few milliseconds after the fork (more on a loaded
machine); if lre died inside that window the leader would keep running.
So setpriv does not exec the command itself but a tiny ``/bin/sh`` guard
(``_GUARD``) that, with the signal already armed, compares its parent pid
with lre's and exits 137 when they differ (lre died: the leader was
re-parented), else unsets the ``PWD`` the shell added (or restores the
Command's own) and execs the command. The guard is used only when
``/bin/sh`` is dash, whose ``exec`` adds nothing else to the environment;
with another shell the plain setpriv path and its window remain. The
``preexec_fn`` path checks ``getppid`` itself and has no such window, but
forks the whole process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from lre.errors import InvalidArgument
from lre.worker._guardian import ProcessGuardian
from lre.worker._oom import OomCounters

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[[int, int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = _load_prctl()

#: util-linux ``setpriv`` can set the parent-death signal and exec the
#: command. Going through it lets ``subprocess`` use vfork (about 1 ms
#: instead of about 10 ms of a blocked event loop for a forked ``preexec_fn``
#: in a large process, measured); without it the preexec hook is used.
_SETPRIV = shutil.which("setpriv") if _PRCTL is not None else None

#: The parent check run between setpriv and the command (see the module
#: docstring): ``$1`` is lre's pid; ``$2``, in the ``PWD`` variant, the
#: Command's own ``PWD``. dash sets ``PWD`` on start-up, so it is removed or
#: reset to keep the action's environment exactly the Command's.
_GUARD = 'test "$PPID" = "$1" || exit 137; unset PWD; shift; exec "$@"'
_GUARD_PWD = 'test "$PPID" = "$1" || exit 137; PWD=$2; export PWD; shift 2; exec "$@"'
_GUARD_SHELL = (
    "/bin/sh"
    if _SETPRIV is not None and os.path.basename(os.path.realpath("/bin/sh")) == "dash"
    else None
)


def _setpriv_command(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """``argv`` run through setpriv (and the parent guard when available)."""
    assert _SETPRIV is not None
    if _GUARD_SHELL is None:
        # setpriv execvp()s argv with the action's PATH, argv[0] unchanged.
        return [_SETPRIV, "--pdeathsig", "KILL", "--", *argv]
    # dash's exec searches the action's PATH the same way, argv[0] unchanged.
    lre = str(os.getpid())
    if "PWD" in env:
        guard = [_GUARD_SHELL, "-c", _GUARD_PWD, "sh", lre, env["PWD"]]
    else:
        guard = [_GUARD_SHELL, "-c", _GUARD, "sh", lre]
    return [_SETPRIV, "--pdeathsig", "KILL", "--", *guard, *argv]


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


def _death_signal_hook(parent_pid: int) -> Callable[[], None] | None:
    """A preexec hook that asks for SIGKILL when the parent dies.

    It only calls an already-resolved C function and ``os.getppid`` (no
    imports, no allocation-heavy work), so it is safe in the forked child.
    Exits at once if the parent already died before the request took hold.
    """
    prctl = _PRCTL
    if prctl is None:
        return None

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(127)

    return hook


@dataclass(frozen=True, slots=True)
class ProcessOutcome:
    """How an action's process ended.

    ``exit_code`` is the leader's exit status, or ``128 + signal`` when it
    was killed by a signal (``signal`` then names it). ``timed_out`` is true
    when lre killed it for exceeding its timeout; ``oom_killed`` when it died
    of a SIGKILL lre did not send while the kernel's OOM-kill counter grew.
    ``cpu_seconds`` and ``max_rss_bytes`` come from the leader's rusage
    (including descendants it waited for).
    """

    exit_code: int
    signal: int | None
    timed_out: bool
    oom_killed: bool
    started_at: float
    ended_at: float
    cpu_seconds: float
    max_rss_bytes: int

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
_GUARDIAN = ProcessGuardian()


def guardian_pid() -> int | None:
    """The pid of this process's guardian (``_guardian.py``) once the first
    action started it, else None: a child of lre that is not an action's."""
    return _GUARDIAN.pid


#: Threads that start action processes (a spawn blocks its thread until the
#: child has exec'd; two in parallel keep a busy machine's scheduling latency
#: from serialising every start; more contend for the GIL with the event loop
#: and cost more CPU than they save, measured with bench/bench_worker.py).
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
        if self._nice:
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self._nice)
            except OSError as error:  # raising niceness is always allowed; be safe anyway
                log.warning("cannot set niceness %d for action processes: %s", self._nice, error)
        while True:
            self._jobs.get()()

    async def spawn(
        self, start: Callable[[], tuple[subprocess.Popen[bytes], int, tuple[int, ...]]]
    ) -> tuple[subprocess.Popen[bytes], int, tuple[int, ...]]:
        """Run ``start`` (returns the Popen, its pidfd and the OOM counters)
        in a spawner thread and return what it returned, or raise what it raised.

        Not cancellable while the job runs (a process started meanwhile must
        be supervised and killed by the caller); cancellation is seen at the
        caller's next checkpoint. If the Trio run is gone by the time the
        process started, the thread kills its group and reaps it.
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
                    _killpg(popen.pid, signal.SIGKILL)
                    _GUARDIAN.remove(popen.pid)
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


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdout_path: Path,
    stderr_path: Path,
    timeout: float,
    kill_grace: float,
    pass_fds: Sequence[int] = (),
    on_started: Callable[[int], None] | None = None,
    nice: int = 0,
) -> ProcessOutcome:
    """Run ``argv`` to completion, timeout or cancellation.

    The process starts at niceness ``nice`` (0-19; see ``_Spawner``).

    ``on_started(pid)`` is called right after the fork (the pid is also the
    process group id). Returns a ``ProcessOutcome`` for normal ends and
    timeouts. On cancellation the group is terminated and reaped (shielded)
    and ``trio.Cancelled`` propagates. Raises ``InvalidArgument`` when the
    arguments and environment exceed the kernel's limit (E2BIG), or when the
    program cannot be executed (not found, not executable), naming argv[0].
    """
    if _SETPRIV is not None:
        command = _setpriv_command(argv, env)
        hook = None
    else:
        command = list(argv)
        hook = _death_signal_hook(os.getpid())
    environment = dict(env)
    fds = tuple(pass_fds)

    def start() -> tuple[subprocess.Popen[bytes], int, tuple[int, ...]]:
        # Runs in a spawner thread (see the module docstring).
        _resolve_program(argv[0], cwd, env)  # a clear error instead of exit 127
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        stdout_fd = os.open(stdout_path, flags, 0o600)
        try:
            stderr_fd = os.open(stderr_path, flags, 0o600)
            try:
                oom_before = _OOM.read_recent()
                try:
                    popen = subprocess.Popen(
                        command,
                        cwd=cwd,
                        env=environment,
                        stdin=subprocess.DEVNULL,
                        stdout=stdout_fd,
                        stderr=stderr_fd,
                        close_fds=True,
                        pass_fds=fds,
                        start_new_session=True,
                        preexec_fn=hook,
                    )
                except (FileNotFoundError, PermissionError, NotADirectoryError) as error:
                    raise InvalidArgument(
                        f"Command.arguments[0]: {argv[0]!r} cannot be executed: {error.strerror}"
                    ) from None
                except OSError as error:
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
        _GUARDIAN.add(popen.pid)
        try:
            pidfd = os.pidfd_open(popen.pid)
        except BaseException:
            _killpg(popen.pid, signal.SIGKILL)
            _GUARDIAN.remove(popen.pid)
            popen.wait()
            raise
        return popen, pidfd, oom_before

    if not 0 <= nice <= 19:
        raise ValueError(f"nice: {nice} is not in 0..19")
    popen, pidfd, oom_before = await _spawner_for(nice).spawn(start)
    started_at = trio.current_time()
    return await _supervise(popen, pidfd, started_at, timeout, kill_grace, oom_before, on_started)


async def _supervise(
    popen: subprocess.Popen[bytes],
    pidfd: int,
    started_at: float,
    timeout: float,
    kill_grace: float,
    oom_before: tuple[int, ...],
    on_started: Callable[[int], None] | None,
) -> ProcessOutcome:
    pid = popen.pid
    timed_out = False
    we_killed = False
    status = 0
    rusage = None
    try:
        if on_started is not None:
            on_started(pid)
        try:
            with trio.move_on_after(timeout) as scope:
                await trio.lowlevel.wait_readable(pidfd)
            if scope.cancelled_caught:
                timed_out = True
                we_killed = True
                await _terminate_group(pid, pidfd, kill_grace)
        except BaseException:
            we_killed = True
            with trio.CancelScope(shield=True):
                await _terminate_group(pid, pidfd, kill_grace)
            raise
    finally:
        # The leader has exited (or is being killed) but is not reaped yet,
        # so the group id still belongs to us: kill whatever is left in it.
        _killpg(pid, signal.SIGKILL)
        _GUARDIAN.remove(pid)
        _, status, rusage = _reap(pid, pidfd)
        popen.returncode = os.waitstatus_to_exitcode(status)
    ended_at = trio.current_time()
    term_signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    exit_code = 128 + term_signal if term_signal is not None else os.WEXITSTATUS(status)
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
    )


def kill_group(pgid: int) -> None:
    """SIGKILL a running action's process group (no error if it is gone)."""
    _killpg(pgid, signal.SIGKILL)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def _terminate_group(pid: int, pidfd: int, kill_grace: float) -> None:
    """SIGTERM the group, wait up to ``kill_grace`` for the leader, SIGKILL it."""
    _killpg(pid, signal.SIGTERM)
    with trio.move_on_after(kill_grace):
        await trio.lowlevel.wait_readable(pidfd)
    _killpg(pid, signal.SIGKILL)


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
