"""``LocalPeers`` tells lre's own processes' connections from everyone else's:
a real listener on 127.0.0.1, this process as a normal client and a child
process (what an action is: a descendant of lre) as the other."""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import subprocess
import sys

import pytest

from lre.service import LocalPeers
from lre.service._local_peers import parse_peer


def test_peers_parse_as_grpc_names_them() -> None:
    assert parse_peer("ipv4:127.0.0.1:5555") == (socket.AF_INET, "127.0.0.1", 5555)
    assert parse_peer("ipv6:[::1]:77") == (socket.AF_INET6, "::1", 77)
    assert parse_peer("ipv6:[::ffff:127.0.0.1]:9") == (socket.AF_INET, "127.0.0.1", 9)
    assert parse_peer("unix:/tmp/x.sock") is None
    assert parse_peer("ipv4:nonsense:1") is None


def _grpc_name(connection: socket.socket) -> str:
    host, port = connection.getpeername()[:2]
    return f"ipv4:{host}:{port}"


def test_a_connection_of_a_child_process_is_refused_and_ours_is_not() -> None:
    peers = LocalPeers()
    assert peers.available
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        # Our own connection (lre's own process, or a client outside lre).
        with socket.create_connection(("127.0.0.1", port)) as ours:
            accepted, _ = server.accept()
            with accepted:
                verdict = peers.judge(_grpc_name(accepted), port, "127.0.0.1")
                assert verdict is not None and verdict.allowed, verdict
                assert ours.fileno() >= 0
        # A child's connection, held while we judge it.
        code = (
            "import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])));"
            "print('up', flush=True); sys.stdin.read()"
        )
        child = subprocess.Popen(
            [sys.executable, "-c", code, str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None and child.stdout.readline() == "up\n"
            accepted, _ = server.accept()
            with accepted:
                name = _grpc_name(accepted)
                verdict = peers.judge(name, port, "127.0.0.1")
                assert verdict is not None and not verdict.allowed
                assert f"process {child.pid}" in verdict.reason
                # Cached per connection: the next call needs no /proc walk.
                assert peers.judge(name, port, "127.0.0.1", cached_only=True) == verdict
                # Once the child is gone nobody holds the socket: refused too.
                child.communicate("")
                verdict = peers.judge(name, port, "127.0.0.1")
                assert verdict is not None and not verdict.allowed, verdict
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
    peers.close()


def test_only_action_processes_are_refused_when_lre_names_them() -> None:
    # lre inside a test process: the test's own child processes are clients,
    # not actions; a child counts only as a listed action root (or below one).
    code = (
        "import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])));"
        "print('up', flush=True); sys.stdin.read()"
    )
    roots: list[int] = []
    peers = LocalPeers(lambda: roots)
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        child = subprocess.Popen(
            [sys.executable, "-c", code, str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None and child.stdout.readline() == "up\n"
            accepted, _ = server.accept()
            with accepted:
                verdict = peers.judge(_grpc_name(accepted), port, "127.0.0.1")
                assert verdict is not None and verdict.allowed, verdict
        finally:
            child.communicate("")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        child = subprocess.Popen(
            [sys.executable, "-c", code, str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            roots[:] = [child.pid]
            assert child.stdout is not None and child.stdout.readline() == "up\n"
            accepted, _ = server.accept()
            with accepted:
                verdict = peers.judge(_grpc_name(accepted), port, "127.0.0.1")
                assert verdict is not None and not verdict.allowed, verdict
        finally:
            child.communicate("")
    peers.close()


def test_out_of_descriptors_the_guard_refuses_and_looks_again_later() -> None:
    # A child (an action) holds the connection; this process (lre) then has
    # no descriptor left for reading /proc: refused, never let through, and
    # not cached: with descriptors again the child is found.
    code = (
        "import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])));"
        "print('up', flush=True); sys.stdin.read()"
    )
    peers = LocalPeers()
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as ours:
            accepted, _ = server.accept()
            with accepted:  # opens the netlink socket while there are descriptors
                assert ours.fileno() >= 0
                verdict = peers.judge(_grpc_name(accepted), port, "127.0.0.1")
                assert verdict is not None and verdict.allowed, verdict
        child = subprocess.Popen(
            [sys.executable, "-c", code, str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        spare: list[int] = []
        limits = resource.getrlimit(resource.RLIMIT_NOFILE)
        try:
            assert child.stdout is not None and child.stdout.readline() == "up\n"
            accepted, _ = server.accept()
            with accepted:
                name = _grpc_name(accepted)
                resource.setrlimit(
                    resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, limits[1])
                )
                with contextlib.suppress(OSError):
                    while True:
                        spare.append(os.dup(0))
                with pytest.raises(OSError):
                    os.dup(0)  # really none left
                verdict = peers.judge(name, port, "127.0.0.1")
                for fd in spare:
                    os.close(fd)
                spare.clear()
                resource.setrlimit(resource.RLIMIT_NOFILE, limits)
                assert verdict is not None and not verdict.allowed, verdict
                assert "out of file descriptors" in verdict.reason
                again = peers.judge(name, port, "127.0.0.1")
                assert again is not None and f"process {child.pid}" in again.reason, again
        finally:
            for fd in spare:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)
            child.communicate("")
    peers.close()
