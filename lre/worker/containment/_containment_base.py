"""The contract every containment backend follows (``Containment``), the
per-action spawn options, and the spawner thread's set-up.

The backends are ``PidNamespace`` (``_pid_namespace.py``), ``UserNamespace``
(``_user_namespace.py``) and ``ProcessGroupSweep`` (``_group_sweep.py``);
``_containment.py`` describes them and chooses one.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import trio

from lre.worker.containment._guardian import ProcessGuardian
from lre.worker.containment._syscalls import LIBC as _LIBC
from lre.worker.containment._syscalls import call as _call
from lre.worker.usage import peak_tool_missing, report_argv
from lre.worker.view import ActionView, OverlayXattrs, make_layers

log = logging.getLogger(__name__)

#: ``unshare`` flag: a filesystem context (root, cwd) of the thread's own.
CLONE_FS = 0x00000200


#: argv[0] of the process lre starts for an action when it is lre's wrapper
#: (pid 1 of a namespace, ``unshare``; never a shell, see
#: ``_process._labelled``), not the action itself: ``ps`` then shows
#: ``lre-action ... -- <the action's argv>`` above the action's own line,
#: which always carries exactly the action's argv.
WRAPPER_LABEL = "lre-action"


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
    #: Keep the view's mount namespace open past the action's end
    #: (``Containment.held_view``), so that its teardown (every unmount,
    #: and the RCU grace period the kernel waits for after them) happens
    #: where the caller closes it instead of in the action's exit, which
    #: lre waits for.
    hold_view: bool = False
    #: The command runs as lre's own user, root (no ``action_user`` of its
    #: own): in a view, a backend that can (``PidNamespace``) gives it only
    #: ``_capabilities.ALLOWED`` and a read-only ``/proc``.
    drop_root_privileges: bool = False


@dataclass(frozen=True, slots=True)
class ActionLaunch:
    """What ``Containment.command`` wraps: the action's argv and how it starts."""

    argv: Sequence[str]
    #: In a view of its own (only where ``can_view``).
    view: bool = False
    #: The action's own ``PWD`` (None: it has none).
    pwd: str | None = None
    #: The descriptors the action is handed besides 0-2 (``pass_fds``).
    keep_fds: Sequence[int] = ()
    #: Only where ``peak_tool``: the descriptor, also handed to the first
    #: process, where pid 1 writes the peak of the command's tree.
    peak_report: int | None = None


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
    #: lre's own processes at the top of an action's tree, which run none
    #: of the action's programs: 1 = the first process, 2 = it and its one
    #: child (``unshare --fork`` and the namespace's init). The sampler
    #: leaves their memory out of the action's figure.
    helper_processes: int = 0
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
    #: True when every action runs in a network namespace where lre's
    #: listeners (and the host's loopback and abstract sockets) do not exist
    #: (``_action_network``); False: the listener guard is all there is.
    hides_listeners: bool = False
    #: GNU time when it is this backend's pid 1 and reports the peak of the
    #: command's tree (``_tree_peak``): ``command`` then takes a
    #: ``peak_report`` descriptor. None: lre's own ``wait4`` is all there is.
    peak_tool: str | None = None

    def __init__(self) -> None:
        #: Kills every listed action when lre dies (started on first use).
        self.guardian = ProcessGuardian()

    def root_actions_missing(self) -> tuple[str, ...]:
        """What this backend cannot take from an action that runs as a root
        lre's own user in a view (``SpawnOptions.drop_root_privileges``), in
        words ``/status`` and ``lre doctor`` show; empty when nothing is
        missing or lre is not root."""
        return ()

    def network_missing(self) -> str | None:
        """Why this backend's actions reach no address outside the machine
        (shown by ``/status`` and ``lre doctor``); None when they do, or
        when they share lre's own network (``hides_listeners`` False)."""
        return None

    def dns_forwarder(self) -> str | None:
        """The address of a DNS forwarder in the actions' network namespace
        that passes queries to the host's own nameservers, loopback ones
        included (``_action_dns``); None when there is none (no outside
        stack, or actions share lre's network)."""
        return None

    def peak_missing(self) -> str | None:
        """Why this backend's short actions get no kernel figure of their
        own tree (``_tree_peak``; shown by ``/status`` and ``lre doctor``);
        None when they do."""
        return None if self.peak_tool is not None else peak_tool_missing()

    def peak_prefix(self, peak_report: int | None) -> list[str] | None:
        """GNU time's argv that reports the command's tree to ``peak_report``
        (``_tree_peak``), the command's argv to follow; None where this
        backend has no such tool or the run has no report file."""
        if peak_report is None or self.peak_tool is None:
            return None
        return report_argv(self.peak_tool, peak_report)

    @abstractmethod
    def command(self, launch: ActionLaunch) -> list[str]:
        """The argv to execute for ``launch.argv``; a backend that puts a
        shell in front of the action must leave the environment as the
        action gave it, and a wrapper must leave ``launch.keep_fds`` as they
        are."""

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

    def make_layers(self, count: int, size_bytes: int) -> list[tuple[int, int]]:
        """``count`` fresh action tmpfs for views (``_view.make_layers``, of
        ``size_bytes``, 0: half of RAM), each as (lre's descriptor, the view
        builder's): ``layers_here`` where views are built in lre's own
        spawner threads. Raises ``OSError`` (none left open)."""
        return layers_here(count, size_bytes)

    def drop_layers(self, layers: list[tuple[int, int]]) -> None:
        """Close lre's descriptors of action tmpfs (``make_layers``; where the
        view builder holds its own, those too): each filesystem is freed once
        no view holds it either. A failing close is logged."""
        close_layers(layers)

    def held_view(self, pid: int) -> int | None:
        """(after ``end``) A descriptor of the mount namespace the action whose
        first process was ``pid`` ran in, kept open for the caller
        (``SpawnOptions.hold_view``), who owns it from now on: closing it
        tears the view down. None when nothing was held (no view, a backend
        that does not hold them, or the descriptor could not be opened)."""
        return None

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


def layers_here(count: int, size_bytes: int) -> list[tuple[int, int]]:
    """``count`` action tmpfs made in lre's process (one descriptor, used by
    lre and by the spawner thread building the view alike). Raises
    ``OSError`` (none left open)."""
    made: list[tuple[int, int]] = []
    try:
        for _ in range(count):
            fd = make_layers(size_bytes)
            made.append((fd, fd))
    except BaseException:
        close_layers(made)
        raise
    return made


def close_layers(layers: list[tuple[int, int]]) -> None:
    """Close lre's descriptor of each action tmpfs; a failing close is logged."""
    for fd, _ in layers:
        try:
            os.close(fd)
        except OSError:
            log.exception("could not close an action's tmpfs (descriptor %d)", fd)


def prepare_spawner_thread() -> None:
    """Give the calling (spawner) thread a filesystem context (root, cwd) of
    its own: a thread sharing it with the others may not enter a mount
    namespace, so without this no view can be made from it. Logs and goes
    on when the call fails (views then fail at their first use)."""
    if _LIBC is None:
        return
    try:
        _call("unshare", CLONE_FS)
    except OSError as error:
        log.warning("spawner thread: cannot unshare its filesystem context (%s)", error)
