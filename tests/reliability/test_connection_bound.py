"""A flood of connections to lre's port is bounded (``listener.max_connections``).

A real lre listens with a small bound; the test opens four times as many raw
TCP connections as the bound allows (a client that never speaks, as a
hostile or broken one would) while a normal client holds a connection it
made before. lre must close every connection past the bound as it arrives,
so its descriptors grow by no more than the bound; keep serving the calls
of the connection it holds, actions included; refuse a new client with
UNAVAILABLE while the bound is full (the client retries: that is the
price of lre keeping its descriptors); and serve new clients again once
the flood is gone.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest

from tests._support.configs import WORKER_EXTRA, app_config_text
from tests._support.reapi import Client, digest
from tests._support.scratch import shown_scratch
from tests._support.servers import free_port
from tests._support.whole_lre import WholeLre, serving, whole_lre

BOUND = 16
FLOOD = 4 * BOUND


@contextmanager
def _lre(max_connections: int) -> Iterator[WholeLre]:
    """A whole lre whose listener holds at most ``max_connections``."""
    with shown_scratch(prefix="lre-connections-") as home:
        port = free_port()
        listener = f'address: "127.0.0.1:{port}", max_connections: {max_connections}'
        text = app_config_text(home, listener=listener, extra_worker=WORKER_EXTRA)
        with whole_lre(home, text, port) as lre:
            yield lre


def _call_on_a_new_connection(port: int) -> None:
    """One call on a channel of its own (channels of one process otherwise
    share their connection); raises ``grpc.RpcError`` when refused."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        capabilities = "/build.bazel.remote.execution.v2.Capabilities/GetCapabilities"
        call = channel.unary_unary(
            capabilities, request_serializer=None, response_deserializer=None
        )
        call(b"", timeout=5)


def _sockets(pid: int) -> int:
    """How many sockets ``pid`` holds."""
    count = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:")
        except OSError:
            continue
    return count


def _closed_by_peer(connection: socket.socket) -> bool:
    connection.setblocking(False)
    try:
        return connection.recv(64) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_a_flood_of_connections_is_bounded_and_lre_keeps_serving() -> None:
    held: list[socket.socket] = []
    with _lre(BOUND) as lre:
        process, port, log = lre.process, lre.port, lre.log
        client = Client(f"127.0.0.1:{port}")
        try:
            serving(lre, client)
            assert client.run(["/bin/sh", "-c", "true"]).result.exit_code == 0
            before = _sockets(process.pid)
            for _ in range(FLOOD):
                held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            time.sleep(1.0)
            grown = _sockets(process.pid) - before
            closed = sum(_closed_by_peer(connection) for connection in held)
            assert grown <= BOUND, f"lre took {grown} of {FLOOD} connections, bound {BOUND}"
            assert closed >= FLOOD - BOUND, f"only {closed} of {FLOOD} were closed"
            # The connection lre held before goes on working, actions included.
            assert len(client.missing([digest(b"held")])) == 1
            assert client.run(["/bin/sh", "-c", "echo held"]).result.exit_code == 0
            # A new client (a connection of its own) is refused while the bound is full.
            with pytest.raises(grpc.RpcError) as refused:
                _call_on_a_new_connection(port)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            for connection in held:
                connection.close()
            held.clear()
            time.sleep(0.5)
            _call_on_a_new_connection(port)
            fresh = Client(f"127.0.0.1:{port}")
            try:
                serving(lre, fresh)
                assert fresh.run(["/bin/sh", "-c", "echo back"]).result.exit_code == 0
            finally:
                fresh.close()
            assert process.poll() is None
        finally:
            for connection in held:
                connection.close()
            client.close()
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
