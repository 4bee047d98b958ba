"""Freezing an action's processes through a cgroup freezer lre owns.

Where lre may create cgroups in the v1 ``freezer`` hierarchy (as root on a
host that mounts it read-write, as this one does at
``/sys/fs/cgroup/freezer``), ``CgroupFreezer`` makes one cgroup per frozen
action, ``/sys/fs/cgroup/freezer/lre-{pid}/{n}/``: it sets ``freezer.state``
to ``FROZEN`` and then moves the action's processes into it (a process that
joins a frozen cgroup is frozen as it joins; what it forks afterwards is born
inside, so it is frozen too). A thaw writes ``THAWED``. Unlike SIGSTOP, the
action sees nothing (no SIGCHLD/stop report to a parent that watches, no
SIGCONT to handle), and no process is half-stopped.

A frozen task ignores even SIGKILL until it is thawed (measured here, Linux
6.18: a killed task stays in ``D`` until ``THAWED``), so a kill must be
followed by ``thaw``; ``MemoryControl`` does that.

Where the hierarchy is missing or lre cannot create a cgroup in it,
``available`` is False (``why_not`` says why) and the memory control uses
SIGSTOP / SIGCONT instead. cgroup v2's ``cgroup.freeze`` would do the same
within a delegated subtree; lre owns none here, so v2 is not used.

Failures to move a process (it ended meanwhile) are ignored; failure to make
or freeze the cgroup raises ``OSError`` (the caller falls back to signals).
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["CgroupFreezer", "cgroup_freezer"]

log = logging.getLogger(__name__)

_FREEZER_ROOT = Path("/sys/fs/cgroup/freezer")


def _write(path: Path, data: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)


class CgroupFreezer:
    """Per-action v1 freezer cgroups of this lre process (see the module docstring)."""

    def __init__(self, root: Path = _FREEZER_ROOT) -> None:
        self.root = root
        self.base: Path | None = None
        self.why_not = ""
        self._numbers = itertools.count(1)
        self._groups: dict[str, Path] = {}
        self._open()

    def _open(self) -> None:
        if not (self.root / "tasks").exists() or not (self.root / "cgroup.procs").exists():
            self.why_not = f"no cgroup v1 freezer hierarchy at {self.root}"
            return
        base = self.root / f"lre-{os.getpid()}"
        try:
            self._remove_stale()
            base.mkdir(exist_ok=True)
        except OSError as error:
            self.why_not = f"cannot create a freezer cgroup ({error.strerror})"
            return
        self.base = base

    def _remove_stale(self) -> None:
        """Freezer cgroups of lre processes that are gone (thawed first, so a
        process left in one is not left frozen for ever)."""
        for entry in self.root.glob("lre-*"):
            pid = entry.name[4:]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                for child in entry.iterdir():
                    if child.is_dir():
                        _thaw_and_remove(child)
                _thaw_and_remove(entry)

    @property
    def available(self) -> bool:
        return self.base is not None

    def describe(self) -> str:
        if self.base is not None:
            return f"cgroup v1 freezer ({self.base})"
        return f"SIGSTOP of the action's processes ({self.why_not})"

    def freeze(self, key: str, pids: Iterable[int]) -> int:
        """Freeze ``pids`` as (part of) action ``key``: the first call for a key
        makes and freezes its cgroup, later calls add more processes to it.
        Returns how many processes were moved. Raises ``OSError`` when the
        cgroup cannot be made or frozen, or when the freezer is not available."""
        if self.base is None:
            raise OSError(f"no freezer cgroup: {self.why_not}")
        group = self._groups.get(key)
        if group is None:
            group = self.base / f"a{next(self._numbers)}"
            group.mkdir()
            self._groups[key] = group
        _write(group / "freezer.state", "FROZEN")
        own = os.getpid()
        moved = 0
        for pid in pids:
            if pid == own or pid <= 1:
                continue
            try:
                _write(group / "cgroup.procs", str(pid))
                moved += 1
            except OSError:
                pass  # it ended meanwhile
        return moved

    def members(self, key: str) -> tuple[int, ...]:
        """The processes in ``key``'s cgroup now (empty when it has none)."""
        group = self._groups.get(key)
        if group is None:
            return ()
        try:
            text = (group / "cgroup.procs").read_text()
        except OSError:
            return ()
        return tuple(int(line) for line in text.split())

    def state(self, key: str) -> str:
        """``freezer.state`` of ``key``'s cgroup ("" when it has none)."""
        group = self._groups.get(key)
        if group is None:
            return ""
        try:
            return (group / "freezer.state").read_text().strip()
        except OSError:
            return ""

    def thaw(self, key: str) -> None:
        """Thaw ``key``'s cgroup (nothing when it has none). Its processes stay
        in it (the next freeze reuses it); ``release`` removes it."""
        group = self._groups.get(key)
        if group is not None:
            try:
                _write(group / "freezer.state", "THAWED")
            except OSError as error:
                log.warning("cannot thaw freezer cgroup %s: %s", group, error)

    def release(self, key: str) -> None:
        """The action ended: thaw and remove its cgroup (a process that
        outlived it keeps the cgroup until ``close``)."""
        group = self._groups.pop(key, None)
        if group is not None:
            _thaw_and_remove(group)

    def close(self) -> None:
        """Thaw and remove every cgroup of this process (at exit)."""
        for key in list(self._groups):
            self.release(key)
        if self.base is not None:
            for child in self.base.iterdir():
                if child.is_dir():
                    _thaw_and_remove(child)
            try:
                os.rmdir(self.base)
            except OSError as error:
                log.debug("cannot remove freezer cgroup %s yet: %s", self.base, error)


def _thaw_and_remove(group: Path) -> None:
    try:
        _write(group / "freezer.state", "THAWED")
    except OSError:
        pass
    try:
        os.rmdir(group)
    except OSError as error:
        log.debug("cannot remove freezer cgroup %s yet: %s", group, error)


_FREEZER: CgroupFreezer | None = None


def cgroup_freezer() -> CgroupFreezer:
    """The process-wide ``CgroupFreezer`` (made on first use, closed at exit)."""
    global _FREEZER
    if _FREEZER is None:
        _FREEZER = CgroupFreezer()
        atexit.register(_FREEZER.close)
    return _FREEZER
