"""``UserNamespace``: the ``"userns"`` containment backend, a PID namespace
per action without privileges, inside a user namespace (see
``_containment.py``)."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from lre.worker.containment._action_dns import FORWARDER
from lre.worker.containment._action_network import OutsideNetwork
from lre.worker.containment._containment_base import (
    ActionLaunch,
    Containment,
    ContainmentUnavailable,
    SpawnOptions,
)
from lre.worker.containment._syscalls import LIBC as _LIBC
from lre.worker.containment._syscalls import killpg as _killpg
from lre.worker.usage import peak_tool
from lre.worker.view import OverlayXattrs, ViewHelper

log = logging.getLogger(__name__)


class UserNamespace(Containment):
    """A PID namespace per action without privileges, inside a user namespace.

    lre is multi-threaded, and a multi-threaded process may not enter a user
    namespace, so each action starts through util-linux ``unshare --user
    --map-current-user --pid --fork --kill-child``: ``unshare`` stays in
    lre's namespace and waits, its child is pid 1 of the new one (GNU
    ``time`` reporting the command's tree, ``_tree_peak``, or else
    ``timeout -- 0``; either way the command is not pid 1) and dies with it. The
    command keeps lre's user id (mapped to itself). When the action exits
    normally, ``unshare`` has waited for pid 1, whose exit killed and reaped
    the namespace: nothing runs any more. When lre kills it, the namespace
    dies a moment after ``unshare``; ``end`` then answers False (directory
    removed, outputs copied). Raises ``ContainmentUnavailable`` when
    ``unshare`` or ``timeout`` is missing or the kernel refuses unprivileged
    user namespaces (some distributions restrict them).

    Every action runs in the network namespace of the view helper
    (``_view_helper``), entered with ``nsenter``, view or not: lre's
    listeners are not there (``_action_network``). Where no helper can run,
    each action gets a network namespace of its own instead (``unshare
    --net``: no network at all, logged), never lre's.
    """

    name = "userns"
    signals_as_exit_codes = True
    hides_listeners = True
    # ``unshare --fork`` and its child, pid 1 (``time`` or ``timeout``) of the namespace
    # (an ``nsenter`` in front of it executes ``unshare`` in its place)
    helper_processes = 2
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
        #: the namespace's maker, without a view helper (pid 1 follows)
        self._unshare = [
            *(unshare, "--user", "--map-current-user", "--net", "--pid", "--fork"),
            *("--kill-child", "--"),
        ]
        try:
            probe = subprocess.run(
                [*self._unshare, init, "--", "0", "true"],
                capture_output=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise ContainmentUnavailable(f"cannot run unshare: {error}") from None
        if probe.returncode != 0:
            reason = probe.stderr.decode(errors="replace").strip() or f"exit {probe.returncode}"
            raise ContainmentUnavailable(f"unprivileged user namespaces refused: {reason}")

        #: Builds views inside a user namespace and holds the actions'
        #: network namespace (None: actions get neither).
        self._views: ViewHelper | None = None
        #: Joins the helper's network namespace to outside addresses.
        self.outside = OutsideNetwork()
        #: first pid -> the helper's descriptor of its view
        self._view_of: dict[int, int] = {}
        self._pending = threading.local()
        nsenter = shutil.which("nsenter")
        if nsenter is not None:
            helper = ViewHelper(unshare, nsenter)
            try:
                helper.start()
            except OSError as error:
                log.warning(
                    "containment userns: actions get no view of their own and no network (%s)",
                    error,
                )
            else:
                self._views = helper
                self.can_view = True
                self.outside.start([str(helper.pid)])
                atexit.register(self.outside.close)
        if self._views is None:
            self.outside.missing = "no view helper runs (see lre's log at start-up)"
        self._inner = [init, "--", "0"]
        #: GNU time as pid 1 where it reports the command's tree (_tree_peak)
        self.peak_tool = peak_tool()

    def network_missing(self) -> str | None:
        return self.outside.missing

    def dns_forwarder(self) -> str | None:
        return FORWARDER if self.outside.running else None

    def command(self, launch: ActionLaunch) -> list[str]:
        # pid 1: GNU time writing the peak of the command's tree to
        # ``peak_report`` (``_tree_peak``), else ``timeout -- 0``.
        first = [*(self.peak_prefix(launch.peak_report) or self._inner), *launch.argv]
        if self._views is None:
            return [*self._unshare, *first]
        inner = self._views.inner(os.geteuid(), os.getegid(), view=launch.view)
        if launch.view:  # entered by ``spawn_context``'s prefix
            return [*inner, *first]
        return [*self._views.enter_network(), *inner, *first]

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

    def make_layers(self, count: int, size_bytes: int) -> list[tuple[int, int]]:
        # Made by the helper, inside its user namespace (lre may mount
        # nothing); lre opens its own descriptor of each through /proc.
        if self._views is None:
            raise OSError("no view helper runs")
        theirs = self._views.layers(count, size_bytes)
        made: list[tuple[int, int]] = []
        try:
            for fd in theirs:
                path = f"/proc/{self._views.pid}/fd/{fd}"
                made.append((os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), fd))
        except BaseException:
            for own, _ in made:
                os.close(own)
            self._views.release(*theirs)
            raise
        return made

    def drop_layers(self, layers: list[tuple[int, int]]) -> None:
        super().drop_layers(layers)
        if self._views is not None and layers:
            self._views.release(*(theirs for _, theirs in layers))

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
