"""Periodic RSS and CPU sampling of every running action's whole process tree.

Each action runs in its own session (``start_new_session=True``, so its leader's
pid is also its session id and process group id). One *pass* lists ``/proc``
once and reads ``/proc/<pid>/stat`` of processes that may belong to an action;
a process whose session and process group are both unknown is remembered as
foreign and not read again while its pid stays in the listing (a process can
never move into another session, so it can never become a member; a new member
always has a new pid). One stat read yields the session, process group, RSS
and CPU times, so a pass costs one ``listdir`` plus one small read per member.
Members' stat files stay open between passes (``pread`` at offset 0 rereads
them), which saves an open and a close per member and pass; up to
``max_open_fds`` are kept, :meth:`ProcessTreeSampler.close` releases them.

Accounting per action:

- RSS: sum of the members' resident pages (``stat`` field 24) times the page
  size. Pages shared between members (fork, shared libraries) count once per
  process, so the figure errs on the high side. Proportional set sizes
  (``smaps_rollup``) would not multiply them, but reading them costs the
  kernel a walk of every member's page tables each pass: 184 ms a pass on
  2,000 processes against 13 ms for ``stat`` (docs/resource-control.md), too
  much for a 250 ms period.
- Members are counted from their ``exec`` on: a member is found through the
  session, group or namespace of the action's first process, which is
  registered after it executed its program, so lre's own image (which a
  child carries until its ``exec``) is never read from ``/proc``. lre's own
  helpers at the top of the tree (``register``'s ``helpers``: the
  containment's first process, and under userns its child, the namespace's
  init) stay members (frozen, signalled) but their memory is not counted.
- Private tmpfs: an action registered with ``private_tmpfs`` (it runs in a
  view, whose ``/tmp`` and ``/dev/shm`` are one fresh tmpfs of its own,
  ``_view._mount_private_tmpfs``) also has the space used there counted:
  ``/proc/<pid>/root/tmp`` of one of its processes is opened once
  (``O_PATH``) when it is not lre's own filesystem (compared by device), and
  each pass asks its filesystem (``fstatvfs``: one call, no path walk). The
  descriptor is closed when the action is unregistered. Those pages are
  memory (tmpfs lives in RAM or swap) that no process's RSS shows
  once the file is closed. ``memory_bytes`` is RSS plus that space; the
  peak, the kill line and the memory control use it. A tmpfs file an action
  also maps counts twice (errs high).
- CPU: sum over live members of utime + stime + cutime + cstime, so children
  already reaped by a member are included. The value never decreases (a member
  that exited but is not yet reaped by its parent, or an orphan reparented
  outside the tree, can make the sum dip; the dip is ignored), so CPU of
  orphans is undercounted. Average CPU = CPU time / wall time since the leader
  started (its ``stat`` start time).
- A process that leaves both the session and the process group (``setsid``,
  daemons) is still sampled when its action runs in a PID namespace of its
  own (``pidns`` and ``userns`` containment): a process that is neither
  session nor group member has its ``/proc/<pid>/ns/pid`` read once, and one
  in an action's namespace is counted with that action for its lifetime.
  Under the portable containment such a process is not sampled.

Call :meth:`ProcessTreeSampler.register` right after spawning (before the next
pass): pids classified as foreign during the last two passes are re-checked on
register, so a member seen just before its leader was registered is not lost.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import trio

from lre.errors import out_of_descriptors
from lre.hop import StatField, proc_stat_fields, read_proc_stat
from lre.worker.usage._descriptors import SkipLog, using_reserve

__all__ = ["ActionUsage", "ProcessTreeSampler", "SamplerStatistics"]

log = logging.getLogger(__name__)

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _namespace_of(pid: str) -> str | None:
    """The PID namespace link text of ``/proc/<pid>`` (``self`` for lre), or
    None when it cannot be read (gone, another user's, no /proc)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: Ticks of slack between a pass's start and a process's start time (both
#: rounded down to a tick).
_TICK_MARGIN = 2


def _boot_ticks() -> int:
    """Now, in clock ticks since boot (a process's start time's unit)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * _CLOCK_TICKS)


def _start_ticks(pid: int) -> int:
    """When ``pid`` started (clock ticks since boot); 0 when it cannot be
    read, so that every foreign pid is read again."""
    try:
        return read_proc_stat(pid).start_ticks
    except (OSError, ValueError):
        return 0


def _devices(*paths: str) -> frozenset[int]:
    """The devices of ``paths`` in lre's own mount namespace (unreadable ones left out)."""
    found = set()
    for path in paths:
        try:
            found.add(os.stat(path).st_dev)
        except OSError:
            continue
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class ActionUsage:
    """A frozen view of one action's sampled usage (for the TUI, results, learner).

    ``average_millicpus`` is CPU time / wall time since the leader started, in thousandths
    of a CPU (2000 = two cores busy on average). ``kill_line_bytes`` 0 = none.
    """

    action_id: str
    leader_pid: int
    rss_bytes: int
    peak_rss_bytes: int
    cpu_seconds: float
    average_millicpus: int
    processes: int
    peak_processes: int
    samples: int
    wall_seconds: float
    kill_line_bytes: int
    #: Space used in the action's private /tmp and /dev/shm at the last pass.
    tmpfs_bytes: int = 0
    #: Largest RSS plus private tmpfs any pass saw.
    peak_memory_bytes: int = 0

    @property
    def memory_bytes(self) -> int:
        """RSS plus private tmpfs at the last pass (what the memory control weighs)."""
        return self.rss_bytes + self.tmpfs_bytes


@dataclass(frozen=True, slots=True)
class SamplerStatistics:
    """Cost of sampling: passes done and how long they took (seconds of CPU-bound work)."""

    passes: int
    actions: int
    last_pass_seconds: float
    max_pass_seconds: float
    total_pass_seconds: float
    last_pass_processes: int


class _Tracked:
    __slots__ = (
        "action_id",
        "cpu_ticks",
        "helpers",
        "kill_line",
        "latched",
        "leader",
        "member_pids",
        "namespace",
        "namespace_pending",
        "peak_memory",
        "peak_processes",
        "peak_rss_pages",
        "private_tmpfs",
        "processes",
        "registered_at",
        "rss_pages",
        "samples",
        "start_known",
        "tmpfs",
        "tmpfs_fd",
    )

    def __init__(
        self,
        action_id: str,
        leader: int,
        kill_line: int,
        private_tmpfs: bool = False,
        helpers: int = 0,
    ) -> None:
        self.action_id = action_id
        self.helpers = helpers
        self.private_tmpfs = private_tmpfs
        #: O_PATH descriptor of the action's own /tmp (-1: none found yet)
        self.tmpfs_fd = -1
        self.tmpfs = 0
        self.peak_memory = 0
        self.leader = leader
        self.kill_line = kill_line
        self.latched = False
        self.member_pids: tuple[int, ...] = ()
        self.namespace: str | None = None
        self.namespace_pending = False
        self.registered_at = time.monotonic()
        self.rss_pages = 0
        self.peak_rss_pages = 0
        self.cpu_ticks = 0
        self.processes = 0
        self.peak_processes = 0
        self.samples = 0
        self.start_known = False

    def start_from_boot_ticks(self, start_ticks: int) -> None:
        """Date the action from its leader's start (stat field 22, ticks since boot),
        so CPU burned before register is averaged over the right wall time."""
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / _CLOCK_TICKS
        self.registered_at = min(self.registered_at, time.monotonic() - max(0.0, age))
        self.start_known = True

    def snapshot(self, now: float) -> ActionUsage:
        wall = max(0.0, now - self.registered_at)
        cpu = self.cpu_ticks / _CLOCK_TICKS
        return ActionUsage(
            action_id=self.action_id,
            leader_pid=self.leader,
            rss_bytes=self.rss_pages * _PAGE_SIZE,
            peak_rss_bytes=self.peak_rss_pages * _PAGE_SIZE,
            cpu_seconds=cpu,
            average_millicpus=round(cpu / wall * 1000) if wall > 0 else 0,
            processes=self.processes,
            peak_processes=self.peak_processes,
            samples=self.samples,
            wall_seconds=wall,
            kill_line_bytes=self.kill_line,
            tmpfs_bytes=self.tmpfs,
            peak_memory_bytes=self.peak_memory,
        )


OverLimitHook = Callable[[ActionUsage], object]


class ProcessTreeSampler:
    """Samples registered actions every ``interval`` seconds; start with ``nursery.start``.

    ``on_over_limit`` is called (on the Trio thread, inside the pass) once when an
    action's RSS first exceeds its kill line (reservation x kill factor, given to
    :meth:`register` or :meth:`set_kill_line`); setting a new kill line re-arms
    it. The hook should kill the action's process group and return quickly; an
    exception it raises is logged and the pass goes on.
    """

    def __init__(
        self,
        interval: float = 0.25,
        *,
        on_over_limit: OverLimitHook | None = None,
        max_open_fds: int = 2048,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"sample_interval must be > 0, got {interval}")
        self.interval = interval
        self._on_over_limit = on_over_limit
        self._skips = SkipLog("sampler: listing /proc")
        #: Called (no arguments) at the end of every pass, after the
        #: over-limit hooks: the worker's memory control decides there.
        self.on_pass: Callable[[], object] | None = None
        self._by_id: dict[str, _Tracked] = {}
        self._by_leader: dict[int, _Tracked] = {}
        # pid -> when the pass that classified it as belonging to no action
        # began (clock ticks since boot, the unit of a process's start time)
        self._foreign: dict[int, int] = {}
        self._pass_no = 0
        # foreign pids classified at this tick or later are re-read
        self._recheck_from = 1 << 62
        self._last_pass = 0.0
        self._max_pass = 0.0
        self._total_pass = 0.0
        self._last_processes = 0
        # namespace link text (``pid:[inode]``) -> leader, for actions in a
        # PID namespace of their own; pid -> leader of members found that way
        self._namespaces: dict[str, int] = {}
        self._by_namespace: dict[int, int] = {}
        self._own_namespace = _namespace_of("self")
        # devices of lre's own /tmp and /dev/shm: an action's mount there on
        # one of these is not a private tmpfs (never counted)
        self._host_devices = _devices("/tmp", "/dev/shm")
        # pid -> open fd of /proc/<pid>/stat for members (pread instead of
        # open/read/close each pass; at most max_open_fds are kept)
        self._member_fds: dict[int, int] = {}
        self._max_open_fds = max_open_fds
        # set by ``wake``: ``run`` makes its next pass at once
        self._woken: trio.Event | None = None

    # ------------------------------------------------------------------ registration

    def register(
        self,
        action_id: str,
        leader_pid: int,
        *,
        kill_line_bytes: int = 0,
        private_tmpfs: bool = False,
        helpers: int = 0,
    ) -> None:
        """Start sampling the session/process group led by ``leader_pid``
        (and, with ``private_tmpfs``, the space used in its own /tmp and
        /dev/shm; see the module docstring). ``helpers``: lre's own processes
        at the top of the tree whose memory is not counted (0, 1: the leader,
        2: the leader and its children).

        Raises ``ValueError`` if ``action_id`` or ``leader_pid`` is already registered.
        """
        if action_id in self._by_id:
            raise ValueError(f"action {action_id!r} is already sampled")
        if leader_pid in self._by_leader:
            raise ValueError(f"process group {leader_pid} is already sampled")
        tracked = _Tracked(action_id, leader_pid, kill_line_bytes, private_tmpfs, helpers)
        self._by_id[action_id] = tracked
        self._by_leader[leader_pid] = tracked
        namespace = _namespace_of(str(leader_pid))
        if namespace is not None and namespace != self._own_namespace:
            tracked.namespace = namespace
            self._namespaces[namespace] = leader_pid
        else:
            # The namespace may be its first child's (``unshare --fork``):
            # looked at once, when the pass first meets a child of the leader.
            tracked.namespace_pending = True
        # Pids found foreign by passes that began after the leader started
        # (however many: on a busy machine passes go on between a spawn and
        # its registration) are read again next pass; the older ones cannot
        # be the action's. Checked there, so registering walks nothing.
        self._recheck_from = min(self._recheck_from, _start_ticks(leader_pid) - _TICK_MARGIN)

    def set_kill_line(self, action_id: str, kill_line_bytes: int) -> None:
        """Change an action's kill line (0 = none) and re-arm the hook."""
        tracked = self._by_id[action_id]
        tracked.kill_line = kill_line_bytes
        tracked.latched = False

    def unregister(self, action_id: str) -> ActionUsage | None:
        """Stop sampling; returns the last snapshot (None if not registered)."""
        tracked = self._by_id.pop(action_id, None)
        if tracked is None:
            return None
        self._by_leader.pop(tracked.leader, None)
        if tracked.tmpfs_fd >= 0:
            os.close(tracked.tmpfs_fd)
            tracked.tmpfs_fd = -1
        if tracked.namespace is not None:
            self._namespaces.pop(tracked.namespace, None)
        return tracked.snapshot(time.monotonic())

    # ------------------------------------------------------------------ reading

    def snapshot(self, action_id: str) -> ActionUsage | None:
        tracked = self._by_id.get(action_id)
        return None if tracked is None else tracked.snapshot(time.monotonic())

    def members(self, action_id: str) -> tuple[int, ...]:
        """Pids the last pass counted for the action (live ones; empty if unknown)."""
        tracked = self._by_id.get(action_id)
        return () if tracked is None else tracked.member_pids

    def snapshots(self) -> tuple[ActionUsage, ...]:
        now = time.monotonic()
        return tuple(t.snapshot(now) for t in self._by_id.values())

    def close(self) -> None:
        """Close the cached ``/proc`` file descriptors (the sampler stays usable)."""
        fds, self._member_fds = self._member_fds, {}
        for fd in fds.values():
            os.close(fd)

    def statistics(self) -> SamplerStatistics:
        return SamplerStatistics(
            passes=self._pass_no,
            actions=len(self._by_id),
            last_pass_seconds=self._last_pass,
            max_pass_seconds=self._max_pass,
            total_pass_seconds=self._total_pass,
            last_pass_processes=self._last_processes,
        )

    # ------------------------------------------------------------------ sampling

    def sample_once(self) -> float:
        """Run one pass now; returns its duration in seconds. Never raises for
        processes that vanish mid-pass (they are simply not counted)."""
        started = time.perf_counter()
        self._pass_no += 1
        leaders = self._by_leader
        old_foreign = self._foreign
        recheck_from, self._recheck_from = self._recheck_from, 1 << 62
        pass_tick = _boot_ticks()
        foreign: dict[int, int] = {}
        # per leader: [rss pages, CPU ticks, live members, pid of each live member...]
        sums: dict[int, list[int]] = {leader: [0, 0, 0] for leader in leaders}
        # lre's helpers: leaders, and parents whose children are helpers too
        own_leaders = {leader for leader, t in leaders.items() if t.helpers >= 1}
        own_parents = {leader for leader, t in leaders.items() if t.helpers >= 2}
        members = 0
        try:
            names = using_reserve(lambda: os.listdir("/proc"))
        except OSError as error:
            if out_of_descriptors(error):
                self._skips.skip(error)  # this pass sees only its cached fds
            else:  # pragma: no cover - /proc unavailable
                log.exception("sampler: cannot list /proc")
            names = []
        else:
            self._skips.ok()
        old_fds = self._member_fds
        fds: dict[int, int] = {}
        by_namespace: dict[int, int] = {}
        try:
            for name in names:
                if not name.isdigit():
                    continue
                pid = int(name)
                seen = old_foreign.get(pid)
                if seen is not None and seen < recheck_from:
                    foreign[pid] = seen
                    continue
                fd = old_fds.pop(pid, -1)
                try:
                    if fd < 0:
                        fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
                    # A stat fd stays bound to its process: after the process is
                    # reaped the read fails (ESRCH), so a reused pid never aliases.
                    data = os.pread(fd, 1024, 0)
                except OSError:
                    if fd >= 0:
                        os.close(fd)
                    continue
                try:
                    fields = proc_stat_fields(data)
                except ValueError:
                    os.close(fd)
                    continue
                acc = sums.get(int(fields[StatField.SESSION]))
                if acc is None:
                    acc = sums.get(int(fields[StatField.GROUP]))
                    if acc is None and self._namespaces:
                        acc = self._namespace_member(pid, name, sums, by_namespace)
                    if acc is None:
                        os.close(fd)
                        foreign[pid] = pass_tick
                        continue
                if len(fds) < self._max_open_fds:
                    fds[pid] = fd
                else:
                    os.close(fd)
                acc[1] += (
                    int(fields[StatField.USER_TICKS])
                    + int(fields[StatField.SYSTEM_TICKS])
                    + int(fields[StatField.CHILDREN_USER_TICKS])
                    + int(fields[StatField.CHILDREN_SYSTEM_TICKS])
                )
                if fields[StatField.STATE] not in (b"Z", b"X"):  # dead: no memory, runs nothing
                    parent_pid = int(fields[StatField.PARENT])
                    if pid not in own_leaders and parent_pid not in own_parents:
                        acc[0] += int(fields[StatField.RSS_PAGES])
                    acc[2] += 1
                    acc.append(pid)
                    members += 1
                if pid in leaders:
                    tracked = leaders[pid]
                    if not tracked.start_known:
                        tracked.start_from_boot_ticks(int(fields[StatField.START_TICKS]))
                else:
                    parent = leaders.get(int(fields[StatField.PARENT]))
                    if parent is not None and parent.namespace_pending:
                        self._adopt_namespace(parent, name)
        finally:
            for fd in old_fds.values():  # processes gone from the listing
                os.close(fd)
            self._member_fds = fds
            self._by_namespace = by_namespace
        self._foreign = foreign
        over: list[ActionUsage] = []
        now = time.monotonic()
        for leader, (rss, ticks, count, *pids) in sums.items():
            tracked = leaders[leader]
            tracked.member_pids = tuple(pids)
            tracked.samples += 1
            tracked.rss_pages = rss
            tracked.processes = count
            if rss > tracked.peak_rss_pages:
                tracked.peak_rss_pages = rss
            if count > tracked.peak_processes:
                tracked.peak_processes = count
            if ticks > tracked.cpu_ticks:
                tracked.cpu_ticks = ticks
            if tracked.private_tmpfs:
                tracked.tmpfs = self._tmpfs_used(tracked)
            memory = rss * _PAGE_SIZE + tracked.tmpfs
            if memory > tracked.peak_memory:
                tracked.peak_memory = memory
            if tracked.kill_line and not tracked.latched and memory > tracked.kill_line:
                tracked.latched = True
                over.append(tracked.snapshot(now))
        elapsed = time.perf_counter() - started
        self._last_pass = elapsed
        self._max_pass = max(self._max_pass, elapsed)
        self._total_pass += elapsed
        self._last_processes = members
        hook = self._on_over_limit
        if hook is not None:
            for usage in over:
                try:
                    hook(usage)
                except Exception:
                    log.exception("sampler: over-limit hook failed for %s", usage.action_id)
        if self.on_pass is not None:
            try:
                self.on_pass()
            except Exception:
                log.exception("sampler: pass hook failed")
        return elapsed

    def _tmpfs_used(self, tracked: _Tracked) -> int:
        """Bytes used in the action's private tmpfs (its /tmp and /dev/shm),
        through the descriptor opened for it, else one opened now through
        the root of one of its processes; 0 while none shows a /tmp other
        than lre's own (the view's first process not there yet)."""
        if tracked.tmpfs_fd >= 0:
            try:
                usage = os.fstatvfs(tracked.tmpfs_fd)
            except OSError:
                os.close(tracked.tmpfs_fd)
                tracked.tmpfs_fd = -1
            else:
                return (usage.f_blocks - usage.f_bfree) * usage.f_frsize
        for pid in (tracked.leader, *tracked.member_pids):
            fd = self._private_tmp(pid)
            if fd < 0:
                continue
            try:
                usage = os.fstatvfs(fd)
            except OSError:
                os.close(fd)
                continue
            tracked.tmpfs_fd = fd
            return (usage.f_blocks - usage.f_bfree) * usage.f_frsize
        return 0

    def _private_tmp(self, pid: int) -> int:
        """An O_PATH descriptor of ``pid``'s /tmp when it is not lre's own
        filesystem, else -1 (also when it cannot be opened)."""
        try:
            fd = os.open(f"/proc/{pid}/root/tmp", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return -1
        try:
            if os.fstat(fd).st_dev not in self._host_devices:
                return fd
        except OSError:
            pass
        os.close(fd)
        return -1

    def _adopt_namespace(self, tracked: _Tracked, child: str) -> None:
        tracked.namespace_pending = False
        namespace = _namespace_of(child)
        if namespace is not None and namespace != self._own_namespace:
            tracked.namespace = namespace
            self._namespaces[namespace] = tracked.leader

    def _namespace_member(
        self, pid: int, name: str, sums: dict[int, list[int]], found: dict[int, int]
    ) -> list[int] | None:
        """The sums of the action whose PID namespace ``pid`` is in, if any
        (remembered in ``found`` for the next pass)."""
        leader = self._by_namespace.get(pid)
        if leader is None:
            namespace = _namespace_of(name)
            leader = self._namespaces.get(namespace) if namespace is not None else None
        if leader is None or leader not in sums:
            return None
        found[pid] = leader
        return sums[leader]

    def wake(self) -> None:
        """Make the next pass now rather than at the next tick (Trio thread;
        the memory control calls it on a PSI stall event). Before ``run`` has
        started, or twice before a pass, it has no further effect."""
        if self._woken is not None:
            self._woken.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sample every ``interval`` until cancelled, and at once after ``wake``
        (the next tick is then ``interval`` after that pass); passes are
        skipped while no action is registered, and a late pass does not cause
        a burst of catch-up passes. Cached file descriptors are closed when
        the task ends."""
        self._woken = woken = trio.Event()
        task_status.started()
        deadline = trio.current_time()
        try:
            while True:
                if self._by_id:
                    self.sample_once()
                elif self._member_fds:
                    self.close()
                deadline += self.interval
                now = trio.current_time()
                if deadline < now:
                    deadline = now
                with trio.move_on_at(deadline):
                    await woken.wait()
                if woken.is_set():
                    self._woken = woken = trio.Event()
                    deadline = trio.current_time()
        finally:
            self._woken = None
            self.close()
