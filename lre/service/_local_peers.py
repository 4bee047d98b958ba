"""Whether a TCP client of lre's is one of lre's own actions.

lre's actions keep the network (as Bazel's local sandbox gives it), so an
action can connect to lre's own listeners on 127.0.0.1. ``LocalPeers`` tells
lre's servers, for each call, whether the connection it arrived on belongs to
a process lre started (an action's, whatever the containment), so that they
can refuse it. How, for a peer ``ip:port`` connected to lre's ``port``:

1. A peer address that is not one of this host's (judged by binding a socket
   to it once) is a remote client: allowed. Only processes on this host can be
   actions, and their sockets carry a local source address.
2. The client's socket is looked up in the kernel's socket table of lre's
   network namespace with one exact ``sock_diag`` netlink request (about 8 us,
   unprivileged): its unique cookie and inode. A local peer whose socket is not
   found, or whose socket no process holds any more (inode 0: the sender sent
   its call and exited), is refused.
3. The verdict for that cookie is cached (a cookie is never reused, unlike a
   port). On a miss, every descendant of lre (its children, theirs, ..., which
   covers every process of every action: with ``pidns``/``userns`` they live in
   namespaces whose first process is lre's child, and with ``portable`` lre is
   their subreaper) has the descriptor table of each of its threads read
   (``/proc/<pid>/task/<tid>/fd``: a thread may have a table of its own,
   ``unshare(CLONE_FILES)``): if one holds ``socket:[inode]``, or one's
   descriptors cannot be read (a non-dumpable process of another user), the
   connection is refused.
4. Held by no action, the connection is allowed only once a process that is
   not one of lre's descendants is seen holding it (lre itself included: a
   client in lre's own process). A socket nobody visible holds (a descriptor
   in flight over a Unix socket, one in an io_uring table, a table lre cannot
   read) is refused: the guard refuses whenever it cannot tell. One exception
   keeps clients of other users working for an lre that is not root: a socket
   created by another user (``idiag_uid``) cannot be an action's, since actions
   run as lre's own user, so it is allowed when its holder is unreadable.

This is the second layer: under ``pidns`` and ``userns`` actions run in a
network namespace where lre's listeners do not exist at all
(``lre.worker`` ``_action_network``); under ``portable`` it is the only one.
Limits: a process of an action that escaped lre's process tree (possible only
under ``portable`` where lre could not become a subreaper) is not found; a
Unix-socket listener is not checked (its mode 0600 and the action's view
protect it). Not on Linux (no netlink, no /proc), nothing is refused and
``available`` is False.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import struct
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from lre.errors import out_of_descriptors
from lre.hop import read_proc_stat

__all__ = ["LocalPeers", "PeerVerdict", "parse_peer"]

log = logging.getLogger("lre.service.peers")

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 0x1
_NLM_F_DUMP = 0x300
_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_ALL_STATES = 0xFFFFFFFF
_HEADER = struct.Struct("=IHHII")
_REQUEST = struct.Struct("=BBBxI")
#: Verdicts kept (one per connection; older ones are looked up again).
_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class PeerVerdict:
    """Whether a call may proceed, and why not (for the refusal's message)."""

    allowed: bool
    reason: str = ""
    #: No process holds the client's socket any more: the client went away
    #: (a port probe that connected and closed), so nobody reads an answer.
    gone: bool = False


_ALLOWED = PeerVerdict(True)
#: Why a call is refused (not cached: the next call looks again) when lre
#: could not read who holds its connection for want of file descriptors.
_NO_DESCRIPTORS = "lre is out of file descriptors and cannot tell who holds this connection"


def parse_peer(peer: str) -> tuple[int, str, int] | None:
    """``ipv4:127.0.0.1:5555`` / ``ipv6:[::1]:5555`` -> (family, address, port);
    None for anything else (Unix sockets, unknown forms)."""
    kind, _, rest = peer.partition(":")
    host, _, port_text = rest.rpartition(":")
    if not port_text.isdigit():
        return None
    host = host.strip("[]").split("%", 1)[0]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if kind == "ipv6" and isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped
        if mapped is not None:  # an IPv4 client of a dual-stack listener
            return socket.AF_INET, str(mapped), int(port_text)
        return socket.AF_INET6, str(address), int(port_text)
    if kind == "ipv4" and isinstance(address, ipaddress.IPv4Address):
        return socket.AF_INET, str(address), int(port_text)
    return None


def _sock_id(family: int, src: str, sport: int, dst: str, dport: int) -> bytes:
    """``struct inet_diag_sockid`` (ports and addresses big-endian, no cookie)."""
    size = 16
    raw_src = socket.inet_pton(family, src).ljust(size, b"\0")
    raw_dst = socket.inet_pton(family, dst).ljust(size, b"\0")
    return (
        struct.pack("!HH", sport, dport)
        + raw_src
        + raw_dst
        + struct.pack("=III", 0, 0xFFFFFFFF, 0xFFFFFFFF)
    )


@dataclass(frozen=True, slots=True)
class _Socket:
    cookie: int
    inode: int
    #: The user that created the socket.
    uid: int


class LocalPeers:
    """Tells whether a TCP peer of lre's is a process lre started (see the
    module docstring). Thread-safe; one per lre."""

    def __init__(self, action_roots: Callable[[], Iterable[int]] | None = None) -> None:
        #: The processes every action process is (or descends from); None:
        #: lre's own children (for a process that starts nothing but actions).
        self._action_roots = action_roots
        self._lock = threading.Lock()
        self._verdicts: OrderedDict[int, PeerVerdict] = OrderedDict()
        self._local_addresses: dict[str, bool] = {}
        #: peer string -> parsed local peer, or None (remote or not TCP/IP)
        self._peers: dict[str, tuple[int, str, int] | None] = {}
        self._destinations: dict[tuple[str, str], list[str]] = {}
        self._netlink: socket.socket | None = None
        self._sequence = 0
        #: False where this cannot work (not Linux, or netlink refused).
        self.available = sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")
        #: Connections refused so far (for statistics and tests).
        self.refused = 0
        #: Lookups of a connection's holders (cache misses).
        self.lookups = 0

    def close(self) -> None:
        """Close the netlink socket (opened again on the next use)."""
        with self._lock:
            if self._netlink is not None:
                self._netlink.close()
                self._netlink = None

    def _open(self) -> socket.socket | None:
        """(under the lock) the netlink socket, opened on first use; None (and
        ``available`` False, logged once) when the kernel refuses it."""
        if self._netlink is None and self.available:
            try:
                self._netlink = socket.socket(
                    socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG
                )
            except OSError as error:
                if out_of_descriptors(error):
                    raise  # for now: the call is refused, the guard stays
                log.warning(
                    "cannot open a sock_diag netlink socket (%s): lre's listeners "
                    "cannot tell its actions from other clients",
                    error,
                )
                self.available = False
        return self._netlink

    # ------------------------------------------------------------------ verdicts

    def judge(
        self, peer: str, server_port: int, server_host: str = "", *, cached_only: bool = False
    ) -> PeerVerdict | None:
        """The verdict for a call from ``peer`` (grpc's form, e.g.
        ``ipv4:127.0.0.1:5555``) on lre's listener ``server_host:server_port``
        (``server_host`` empty or a wildcard when unknown). Blocks for a few
        milliseconds on a new connection (reads ``/proc``); with
        ``cached_only`` returns None instead (call again off the event loop)."""
        if not self.available:
            return _ALLOWED
        if peer in self._peers:
            known = self._peers[peer]
        else:
            parsed = parse_peer(peer)
            local = parsed is not None and self._is_local(parsed[0], parsed[1])
            known = self._peers[peer] = parsed if local else None
            if len(self._peers) > _CACHE_SIZE:
                self._peers.clear()
        if known is None:
            return _ALLOWED  # not TCP/IP, or a remote client
        family, address, port = known
        found = self._find(family, address, port, server_host, server_port)
        if not self.available:  # netlink refused just now (logged)
            return _ALLOWED
        if found is None:
            return self._refuse(f"the client socket {address}:{port} is not in this host's table")
        if found.inode == 0:
            return self._refuse(
                f"no process holds the client socket {address}:{port} any more", gone=True
            )
        with self._lock:
            cached = self._verdicts.get(found.cookie)
            if cached is not None:
                self._verdicts.move_to_end(found.cookie)
        if cached is None:
            if cached_only:
                return None
            try:
                cached = self._holders_verdict(found.inode, found.uid)
            except OSError as error:
                if not out_of_descriptors(error):
                    raise
                return self._refuse(_NO_DESCRIPTORS)
            with self._lock:
                self._verdicts[found.cookie] = cached
                while len(self._verdicts) > _CACHE_SIZE:
                    self._verdicts.popitem(last=False)
        if not cached.allowed:
            with self._lock:
                self.refused += 1
        return cached

    def _refuse(self, reason: str, *, gone: bool = False) -> PeerVerdict:
        with self._lock:
            self.refused += 1
        return PeerVerdict(False, reason, gone)

    def _is_local(self, family: int, address: str) -> bool:
        known = self._local_addresses.get(address)
        if known is not None:
            return known
        if ipaddress.ip_address(address).is_loopback:
            local = True
        else:
            try:
                with socket.socket(family, socket.SOCK_DGRAM) as probe:
                    probe.bind((address, 0))
                local = True
            except OSError:
                local = False
        if len(self._local_addresses) < 1024:
            self._local_addresses[address] = local
        return local

    # ------------------------------------------------------------------ the socket table

    def _find(
        self, family: int, address: str, port: int, server_host: str, server_port: int
    ) -> _Socket | None:
        """The client socket ``address:port`` -> lre's ``server_port``."""
        candidates = self._destinations.get((server_host, address))
        if candidates is None:
            candidates = [address]
            try:
                if server_host and not ipaddress.ip_address(server_host).is_unspecified:
                    candidates = [server_host]
            except ValueError:  # a name such as localhost: try the peer's own address
                pass
            if len(self._destinations) < 1024:
                self._destinations[(server_host, address)] = candidates
        for destination in candidates:
            try:
                found = self._exact(family, address, port, destination, server_port)
            except (OSError, ValueError):
                found = None
            if found is not None:
                return found
        return self._scan(family, address, port, server_port)

    def _request(self, family: int, sock_id: bytes, flags: int) -> list[bytes]:
        """Send one sock_diag request; the inet_diag_msg payloads answered."""
        payload = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, _ALL_STATES) + sock_id
        with self._lock:
            netlink = self._open()
            if netlink is None:
                raise OSError("no sock_diag netlink socket")
            self._sequence += 1
            sequence = self._sequence
            header = _HEADER.pack(
                _HEADER.size + len(payload), _SOCK_DIAG_BY_FAMILY, flags, sequence, 0
            )
            netlink.send(header + payload)
            messages: list[bytes] = []
            while True:
                data = netlink.recv(1 << 16)
                offset = 0
                done = not flags & _NLM_F_DUMP
                while offset + _HEADER.size <= len(data):
                    length, kind, _, seq, _ = _HEADER.unpack_from(data, offset)
                    if length < _HEADER.size:
                        break
                    body = data[offset + _HEADER.size : offset + length]
                    offset += (length + 3) & ~3
                    if seq != sequence:
                        continue
                    if kind in (_NLMSG_DONE, _NLMSG_ERROR):
                        done = True
                    else:
                        messages.append(body)
                if done:
                    return messages

    @staticmethod
    def _decode(body: bytes) -> tuple[int, int, bytes, _Socket]:
        """(sport, dport, raw source address, socket) of one inet_diag_msg."""
        sport, dport = struct.unpack_from("!HH", body, 4)
        source = body[8:24]
        cookie_low, cookie_high = struct.unpack_from("=II", body, 44)
        uid, inode = struct.unpack_from("=II", body, 64)
        return sport, dport, source, _Socket(cookie_low | cookie_high << 32, inode, uid)

    def _exact(
        self, family: int, address: str, port: int, destination: str, server_port: int
    ) -> _Socket | None:
        sock_id = _sock_id(family, address, port, destination, server_port)
        for body in self._request(family, sock_id, _NLM_F_REQUEST):
            return self._decode(body)[3]
        return None

    def _scan(self, family: int, address: str, port: int, server_port: int) -> _Socket | None:
        """A dump of the namespace's TCP sockets (a wildcard listener whose
        client chose another source address than the one it connected to)."""
        wanted = socket.inet_pton(family, address).ljust(16, b"\0")
        try:
            bodies = self._request(family, b"\0" * 48, _NLM_F_REQUEST | _NLM_F_DUMP)
        except OSError:
            return None
        for body in bodies:
            sport, dport, source, found = self._decode(body)
            if sport == port and dport == server_port and source == wanted:
                return found
        return None

    # ------------------------------------------------------------------ holders

    def _holders_verdict(self, inode: int, uid: int) -> PeerVerdict:
        with self._lock:
            self.lookups += 1
        target = f"socket:[{inode}]"
        if self._action_roots is None:
            actions = set(_descendants(os.getpid()))
        else:
            roots = set(self._action_roots())
            actions = roots.union(*(_descendants(root) for root in roots))
        for pid in sorted(actions):
            for table in _thread_tables(pid):
                try:
                    if _holds(table, target):
                        return PeerVerdict(
                            False, f"the connection belongs to process {pid}, an action of lre's"
                        )
                except FileNotFoundError:
                    continue  # exited meanwhile
                except PermissionError:
                    return PeerVerdict(
                        False, f"cannot read the descriptors of process {pid}, started by lre"
                    )
        own = os.getpid()
        for pid in (own, *(other for other in _all_processes() if other != own)):
            if pid in actions:
                continue
            try:
                if _holds(f"/proc/{pid}/fd", target):
                    return _ALLOWED
            except OSError:
                continue
        if os.geteuid() != 0 and uid != os.geteuid():
            return _ALLOWED  # another user's socket: never an action's
        return PeerVerdict(
            False,
            "no process lre can see holds the client socket (a thread's own descriptor "
            "table, a descriptor in flight or in an io_uring): lre refuses what it cannot tell",
        )


def _thread_tables(pid: int) -> list[str]:
    """The descriptor tables of every thread of ``pid`` (threads that share
    one list it once each); only the process's own when its threads cannot
    be listed."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return [f"/proc/{pid}/fd"]
    return [f"/proc/{pid}/task/{task}/fd" for task in tasks]


def _holds(table: str, target: str) -> bool:
    """Whether the descriptor table ``table`` (a ``/proc`` fd directory)
    holds ``target`` (``socket:[inode]``). Raises ``OSError`` when the table
    cannot be listed (``FileNotFoundError``: gone; ``PermissionError``:
    another user's or not dumpable)."""
    for name in os.listdir(table):
        try:
            if os.readlink(f"{table}/{name}") == target:
                return True
        except OSError:
            continue
    return False


def _all_processes() -> list[int]:
    """Every process ``/proc`` lists."""
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    """Children of ``pid`` (every thread's), from ``/proc/<pid>/task/*/children``."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError as error:
        if out_of_descriptors(error):
            raise  # a process not found would let its connection through
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as handle:
                found.extend(int(child) for child in handle.read().split())
        except OSError as error:
            if out_of_descriptors(error):
                raise
            continue
    return found


def _descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (not ``root`` itself)."""
    if not os.path.exists(f"/proc/self/task/{threading.get_native_id()}/children"):
        return _descendants_by_scan(root)
    seen: set[int] = set()
    stack = _children(root)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack.extend(_children(pid))
    return sorted(seen)


def _descendants_by_scan(root: int) -> list[int]:
    """The same from every process's parent in ``/proc/<pid>/stat`` (kernels
    without ``children`` files)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            parent = read_proc_stat(name).parent
        except OSError as error:
            if out_of_descriptors(error):
                raise
            continue
        children.setdefault(parent, []).append(int(name))
    found: list[int] = []
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found
