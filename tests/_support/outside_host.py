"""A host "outside this machine" for network tests: a network namespace of
the test's own (its server's, made by ``unshare --net``: no named namespace
file, so nothing of it outlives the server), joined to the host's by a veth
pair on a /30 of 198.51.100.0/24 (TEST-NET-2, documentation addresses no
real host has), with a TCP server in it that answers ``outside`` to every
connection.

An action that reaches it reaches an address outside the machine, as it
would reach a package mirror, without any traffic leaving this machine.
Needs root (``ip netns``); elsewhere the test is skipped, and fails in CI.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from tests._support.ci import in_ci

_LOCK = "/run/lre-test-outside-hosts.lock"
_SERVER = """
import socket, sys
sys.stdin.readline()  # the namespace's address is set
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((sys.argv[1], 0))
server.listen(64)
print(server.getsockname()[1], flush=True)
while True:
    client, _ = server.accept()
    client.sendall(b"outside\\n")
    client.close()
"""


@dataclass(frozen=True)
class OutsideHost:
    """Where the outside server listens."""

    address: str
    port: int
    #: The server's process: its network namespace is the outside host's.
    pid: int


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@contextmanager
def outside_host() -> Iterator[OutsideHost]:
    """An outside host with its server (see the module docstring)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        if in_ci():
            pytest.fail("CI runs as root with iproute2: the outside host must be made")
        pytest.skip("an outside host needs root and iproute2")
    server = subprocess.Popen(
        ["unshare", "--net", "--", sys.executable, "-c", _SERVER, "0.0.0.0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdin is not None and server.stdout is not None
        with open(_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            far = _join(server.pid)
        server.stdin.write("go\n")
        server.stdin.flush()
        line = server.stdout.readline()
        if not line.strip():
            pytest.fail("the outside host's server did not start")
        yield OutsideHost(far, int(line), server.pid)
    finally:
        # The veth pair goes with the server's namespace, and its /30 stays
        # taken until the kernel has removed it (after this returns): never
        # delete it by name here, where another host may own that name by now.
        server.kill()
        server.communicate()


def _join(server: int) -> str:
    """(under the lock) Join the namespace of process ``server`` to the host
    by a veth pair on a /30 no other outside host uses; the server's address.
    A pair half made is deleted before the lock is released, the only time
    its name is surely still this host's."""
    addresses, links = (
        subprocess.run(["ip", "-o", *what], capture_output=True, text=True, check=True).stdout
        for what in (["-4", "addr"], ["link"])
    )
    index = next(
        (
            i
            for i in range(1, 63)
            if f"198.51.100.{4 * i + 1}/30" not in addresses
            and not any(f" lreo{i}a{end}" in links for end in "@:")
        ),
        None,
    )
    if index is None:
        pytest.fail("no free /30 of 198.51.100.0/24 for an outside host")
    near, far = f"198.51.100.{4 * index + 1}", f"198.51.100.{4 * index + 2}"
    outer, inner = f"lreo{index}a", f"lreo{index}b"
    inside = ["nsenter", f"--net=/proc/{server}/ns/net", "--", "ip"]
    _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
    try:
        _run("ip", "link", "set", inner, "netns", str(server))
        _run("ip", "addr", "add", f"{near}/30", "dev", outer)
        _run("ip", "link", "set", outer, "up")
        _run(*inside, "addr", "add", f"{far}/30", "dev", inner)
        _run(*inside, "link", "set", inner, "up")
        _run(*inside, "link", "set", "lo", "up")
    except BaseException:
        subprocess.run(["ip", "link", "del", outer], capture_output=True)
        raise
    return far
