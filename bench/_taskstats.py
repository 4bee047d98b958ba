"""CPU of every task that exits on this machine, by name: Linux taskstats.

``ExitRecorder`` registers a generic-netlink socket for the per-task exit
records of every CPU (``TASKSTATS_CMD_ATTR_REGISTER_CPUMASK``) and reads them
in a thread. Each record carries the task's name at exit (``comm``: the
program it last executed, or the thread name), its pid and parent pid and
its CPU time as the scheduler counted it (``cpu_run_virtual_total``, the
task's ``sum_exec_runtime`` in nanoseconds; not the tick-sampled user/system
split). A process of many
threads gives one record per thread; a short process gives one record.

Needs root (or CAP_NET_ADMIN) and a kernel with CONFIG_TASKSTATS: ``start``
raises ``OSError`` otherwise. Records the kernel drops (the socket's buffer
full) are counted in ``dropped``; a count above zero makes the sums low.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field

_NETLINK_GENERIC = 16
_GENL_ID_CTRL = 0x10
_CTRL_CMD_GETFAMILY = 3
_CTRL_ATTR_FAMILY_ID = 1
_CTRL_ATTR_FAMILY_NAME = 2
_TASKSTATS_CMD_GET = 1
_TASKSTATS_CMD_ATTR_REGISTER_CPUMASK = 3
_TASKSTATS_CMD_ATTR_DEREGISTER_CPUMASK = 4
_TASKSTATS_TYPE_PID = 1
_TASKSTATS_TYPE_STATS = 3
_TASKSTATS_TYPE_AGGR_PID = 4
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
#: Offsets in ``struct taskstats`` (linux/taskstats.h, stable since version 1).
_RUN_VIRTUAL_TOTAL = 72
_COMM = slice(80, 112)
_PID, _PPID = 128, 132


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("HH", length, kind) + payload + b"\0" * (-length % 4)


def _attr_list(data: bytes) -> list[tuple[int, bytes]]:
    """The netlink attributes in ``data``, in order: (type, payload)."""
    found, pos = [], 0
    while pos + 4 <= len(data):
        length, kind = struct.unpack_from("HH", data, pos)
        if length < 4:
            break
        found.append((kind & 0x3FFF, data[pos + 4 : pos + length]))
        pos += (length + 3) & ~3
    return found


def _attrs(data: bytes) -> dict[int, bytes]:
    return dict(_attr_list(data))


def _message(family: int, command: int, attrs: bytes, seq: int) -> bytes:
    body = struct.pack("BBH", command, 1, 0) + attrs
    return struct.pack("IHHII", 16 + len(body), family, _NLM_F_REQUEST, seq, 0) + body


def _messages(data: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos + 16 <= len(data):
        length, kind = struct.unpack_from("IH", data, pos)
        if length < 16:
            break
        out.append((kind, data[pos + 16 : pos + length]))
        pos += (length + 3) & ~3
    return out


@dataclass(frozen=True)
class TaskExit:
    comm: str
    pid: int
    ppid: int
    cpu_seconds: float


@dataclass
class ExitTotals:
    """Per task name: how many exited and their summed CPU seconds."""

    count: Counter[str] = field(default_factory=Counter)
    cpu: Counter[str] = field(default_factory=Counter)

    def add(self, exit_: TaskExit) -> None:
        self.count[exit_.comm] += 1
        self.cpu[exit_.comm] += exit_.cpu_seconds


def descendants(exits: list[TaskExit], root: int) -> ExitTotals:
    """The exits of tasks below ``root`` (a live pid): a task counts when its
    parent chain, through the parents that exited too, reaches ``root``.
    A task whose parent exited without a record (dropped) is left out."""
    parent = {e.pid: e.ppid for e in exits}
    memo: dict[int, bool] = {root: True}

    def below(pid: int) -> bool:
        chain = []
        while pid not in memo:
            chain.append(pid)
            next_ = parent.get(pid)
            if next_ is None or next_ in chain or len(chain) > 64:
                memo[pid] = False
                break
            pid = next_
        answer = memo[pid]
        for seen in chain:
            memo[seen] = answer
        return answer

    totals = ExitTotals()
    for exit_ in exits:
        if below(exit_.ppid):
            totals.add(exit_)
    return totals


class ExitRecorder:
    """Keeps the exit record of every task between ``start`` and ``stop``."""

    def __init__(self) -> None:
        self.exits: list[TaskExit] = []
        self.dropped = 0
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._cpus = f"0-{(os.cpu_count() or 1) - 1}"

    def start(self) -> None:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_GENERIC)
        try:
            sock.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
        sock.bind((0, 0))
        name = _attr(_CTRL_ATTR_FAMILY_NAME, b"TASKSTATS\0")
        sock.send(_message(_GENL_ID_CTRL, _CTRL_CMD_GETFAMILY, name, 1))
        family = None
        for kind, body in _messages(sock.recv(65536)):
            if kind == _NLMSG_ERROR:
                code = -struct.unpack_from("i", body)[0]
                raise OSError(code, f"taskstats family lookup: {os.strerror(code)}")
            family_id = _attrs(body[4:]).get(_CTRL_ATTR_FAMILY_ID)
            if family_id is not None:
                family = struct.unpack("H", family_id[:2])[0]
        if family is None:
            raise OSError(errno.ENOENT, "the kernel has no TASKSTATS family")
        mask = _attr(_TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, self._cpus.encode() + b"\0")
        sock.send(_message(family, _TASKSTATS_CMD_GET, mask, 2))
        self._family = family
        self._sock = sock
        sock.settimeout(0.2)
        self._thread = threading.Thread(target=self._read, name="taskstats", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                data = self._sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError as error:
                if error.errno == errno.ENOBUFS:
                    self.dropped += 1
                    continue
                raise
            for kind, body in _messages(data):
                if kind == _NLMSG_ERROR:
                    continue  # the acknowledgement of the registration
                exits = _exits(body[4:])
                with self._lock:
                    self.exits += exits

    def snapshot(self) -> list[TaskExit]:
        with self._lock:
            return list(self.exits)

    def stop(self) -> list[TaskExit]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._sock is not None:
            mask = _attr(_TASKSTATS_CMD_ATTR_DEREGISTER_CPUMASK, self._cpus.encode() + b"\0")
            try:
                self._sock.send(_message(self._family, _TASKSTATS_CMD_GET, mask, 3))
            finally:
                self._sock.close()
        return self.snapshot()


def _exits(data: bytes) -> list[TaskExit]:
    exits = []
    for kind, payload in _attr_list(data):
        if kind != _TASKSTATS_TYPE_AGGR_PID:
            continue
        inner = _attrs(payload)
        stats = inner.get(_TASKSTATS_TYPE_STATS)
        if stats is None or len(stats) < _PPID + 4:
            continue
        comm = stats[_COMM].split(b"\0", 1)[0].decode(errors="replace")
        (run_ns,) = struct.unpack_from("Q", stats, _RUN_VIRTUAL_TOTAL)
        (pid,) = struct.unpack_from("I", stats, _PID)
        (ppid,) = struct.unpack_from("I", stats, _PPID)
        exits.append(TaskExit(comm, pid, ppid, run_ns / 1e9))
    return exits
