"""What the actions' network costs: the namespace made once per lre and its
slirp4netns, against the host's own network.

    sudo python bench/bench_action_network.py --rounds 5

Needs root (it makes a test host outside the machine in a namespace of its
own, ``tests/_support/outside_host.py``). Per round, alternating sides
(host first, then the actions' namespace, then the other way round):

- ``start``: making the namespace and starting slirp4netns until it says it
  is ready (once per lre, not per action);
- ``enter``: the two ``setns`` calls a pidns spawner makes around each fork
  (per action);
- ``connect``: the median of 200 TCP connects to the outside host, each
  reading its one-line answer;
- ``MB/s``: a 64 MiB download from the outside host.

Prints the medians over rounds per side and the namespace/host ratios.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lre.worker.containment._action_network import OutsideNetwork, make_network_namespace
from lre.worker.containment._syscalls import call
from tests._support.outside_host import outside_host

_CLONE_NEWNET = 0x40000000
_BULK = 64 << 20

_SINK = """
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", 0))
server.listen()
print(server.getsockname()[1], flush=True)
block = b"x" * (1 << 20)
while True:
    client, _ = server.accept()
    with client:
        for _ in range(%d):
            client.sendall(block)
"""


def _in(netns: int | None, work: Callable[[], float]) -> float:
    """``work`` run by a thread inside ``netns`` (None: the host's)."""
    result: list[float] = []

    def run() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if netns is not None:
                call("setns", netns, _CLONE_NEWNET)
            result.append(work())
        finally:
            call("setns", own, _CLONE_NEWNET)
            os.close(own)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return result[0]


def _connects(address: str, port: int) -> float:
    times = []
    for _ in range(200):
        started = time.perf_counter()
        with socket.create_connection((address, port), timeout=10) as sock:
            sock.recv(16)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _download(address: str, port: int) -> float:
    started = time.perf_counter()
    received = 0
    with socket.create_connection((address, port), timeout=30) as sock:
        while chunk := sock.recv(1 << 20):
            received += len(chunk)
    assert received == _BULK, received
    return received / (1 << 20) / (time.perf_counter() - started)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root")
    starts, enters = [], []
    sides: dict[str, dict[str, list[float]]] = {
        "host": {"connect": [], "MB/s": []},
        "actions": {"connect": [], "MB/s": []},
    }
    with outside_host() as host:
        sink = subprocess.Popen(
            ["nsenter", f"--net=/proc/{host.pid}/ns/net", sys.executable, "-c", _SINK % 64],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert sink.stdout is not None
            bulk_port = int(sink.stdout.readline())
            for round_ in range(args.rounds):
                started = time.perf_counter()
                netns = make_network_namespace()
                outside = OutsideNetwork()
                outside.start(["--netns-type=path", f"/proc/self/fd/{netns}"], pass_fds=(netns,))
                starts.append(time.perf_counter() - started)
                assert outside.running, outside.missing
                own = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
                started = time.perf_counter()
                for _ in range(1000):
                    _in_thread_enter(netns, own)
                enters.append((time.perf_counter() - started) / 1000)
                os.close(own)
                order = ["host", "actions"] if round_ % 2 == 0 else ["actions", "host"]
                for side in order:
                    where = None if side == "host" else netns
                    sides[side]["connect"].append(
                        _in(where, lambda: _connects(host.address, host.port))
                    )
                    sides[side]["MB/s"].append(
                        _in(where, lambda: _download(host.address, bulk_port))
                    )
                outside.close()
                os.close(netns)
        finally:
            sink.kill()
            sink.communicate()
    print(f"start (namespace + slirp4netns ready): {statistics.median(starts) * 1e3:.1f} ms")
    print(f"enter (setns there and back, per action): {statistics.median(enters) * 1e6:.1f} us")
    for key in ("connect", "MB/s"):
        host_value = statistics.median(sides["host"][key])
        actions_value = statistics.median(sides["actions"][key])
        scale, unit = (1e3, "ms") if key == "connect" else (1, "MB/s")
        print(
            f"{key}: host {host_value * scale:.3f} {unit}, actions' namespace "
            f"{actions_value * scale:.3f} {unit}, ratio {actions_value / host_value:.2f}"
        )


def _in_thread_enter(netns: int, own: int) -> None:
    call("setns", netns, _CLONE_NEWNET)
    call("setns", own, _CLONE_NEWNET)


if __name__ == "__main__":
    main()
