"""``ProcessGroupSweep``: the ``"portable"`` containment backend, a session
per action, lre as child subreaper, orphans swept at each action's end (see
``_containment.py``)."""

from __future__ import annotations

import logging
import os
import signal
import threading

import trio

from lre.hop import ProcStat, read_proc_stat
from lre.worker.containment._containment_base import ActionLaunch, Containment
from lre.worker.containment._syscalls import LIBC as _LIBC
from lre.worker.containment._syscalls import call as _call
from lre.worker.containment._syscalls import kill as _kill
from lre.worker.containment._syscalls import killpg as _killpg
from lre.worker.containment._syscalls import reap as _reap
from lre.worker.usage import peak_tool, report_argv

log = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36
#: Sweeps at most this many generations of orphans at an action's end.
_SWEEP_PASSES = 16


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
        #: GNU time as each action's first process where it reports the
        #: command's tree (``_tree_peak``): lre's own ``wait4`` of a process
        #: it forked carries lre's image, time's of the command does not.
        self.peak_tool = peak_tool()
        if self.peak_tool is not None:
            # time forks the command and waits for it, and exits with 128 +
            # the signal that ended it.
            self.helper_processes = 1
            self.signals_as_exit_codes = True

    def command(self, launch: ActionLaunch) -> list[str]:
        # GNU time first where it reports the command's tree; else the
        # command is the first process itself.
        prefix = self.peak_prefix(launch.peak_report)
        return [*prefix, *launch.argv] if prefix is not None else list(launch.argv)

    def spawn_started(self, pid: int) -> None:
        super().spawn_started(pid)
        stat = _stat(pid)
        with self._lock:
            self._running[pid] = stat.start_ticks if stat is not None else 0

    def spawn_abandoned(self, pid: int) -> None:
        with self._lock:
            self._running.pop(pid, None)
        super().spawn_abandoned(pid)

    def signal_action(self, pid: int, sig: int) -> None:
        if sig == signal.SIGKILL or not self._led_by_time(pid):
            _killpg(pid, sig)
            return
        # GNU time leads the group: a signal it does not ignore would end it
        # at once, lre would reap it and sweep the command before it had
        # answered (a timed-out command's grace). The rest of the group gets
        # the signal; time exits when the command does.
        for member in _group_members(pid):
            if member != pid:
                _kill(member, sig)

    def _led_by_time(self, pid: int) -> bool:
        """True when ``pid`` is GNU time reporting its command's peak."""
        if self.peak_tool is None:
            return False
        # argv[0] is the tool's path or lre's wrapper label; its options follow
        options = [part.encode() for part in report_argv(self.peak_tool, 0)[1:5]]
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read(4096).split(b"\0")
        except OSError:
            return False
        return argv[1:5] == options

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
                stat = _stat(orphan)
                if stat is None:
                    continue
                born = stat.start_ticks
                if stat.state == "Z":  # an orphan that exited on its own
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
                stat = _stat(orphan)
                if stat is not None and stat.state == "Z":  # exited: reap it now
                    self._forget(orphan)
                    _reap(orphan)
                    continue
                if orphan in self._kept or stat is None or stat.start_ticks < earliest:
                    continue
                self._kept.add(orphan)
                self.guardian.add_process(orphan)

    def _forget(self, orphan: int) -> None:
        if orphan in self._kept:
            self._kept.discard(orphan)
            self.guardian.remove_process(orphan)


def _group_members(group: int) -> list[int]:
    """The processes whose process group is ``group`` (a pass over /proc;
    only for the signals of a timeout or a cancel, never per action)."""
    members = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return [group]
    for name in names:
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None and stat.group == group:
                members.append(int(name))
    return members


def _stat(pid: int) -> ProcStat | None:
    """``pid``'s kernel status line; None when it is gone or unreadable."""
    try:
        return read_proc_stat(pid)
    except (OSError, ValueError):
        return None
