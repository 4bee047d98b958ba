"""What refusing lre's own actions costs a call (issue 27): same-run A/B.

Two gRPC listeners in one process over the same in-memory CAS, A without and
B with the action-peer guard (``LocalPeers``); a client thread makes
FindMissingBlobs calls on one kept-open channel, alternating rounds A, B, ...
Reports the process CPU per call (client and server both, the same on both
sides, so B - A is the guard's cost) and, for a new connection, the cost of
the holders walk with ``--children`` child processes holding ``--fds`` each.

    python bench/bench_peer_guard.py --rounds 10 --calls 2000
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parents[1]))

from lre.cas import MemoryStore
from lre.service import (
    GrpcServer,
    InstanceBackends,
    Instances,
    LocalPeers,
    ServerOptions,
    TrioBridge,
    cache_servicers,
)
from tests._support.reapi import Client


def _calls(address: str, calls: int) -> float:
    with Client(address, instance="") as client:
        client.missing([])  # connect
        started = time.process_time()
        for _ in range(calls):
            client.missing([])
        return (time.process_time() - started) / calls


def _miss_cost(children: int, fds: int, repeats: int) -> float:
    """CPU seconds of one holders walk (a new connection) with ``children``
    descendants holding ``fds`` descriptors each."""
    code = (
        f"import os, sys; fds = [os.open('/dev/null', os.O_RDONLY) for _ in range({fds})]; "
        "sys.stdin.read()"
    )
    spawned = [
        subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
        for _ in range(children)
    ]
    try:
        time.sleep(1.0)
        peers = LocalPeers()
        with socket.create_server(("127.0.0.1", 0)) as server:
            port = server.getsockname()[1]
            cost = []
            for _ in range(repeats):
                with socket.create_connection(("127.0.0.1", port)):
                    accepted, _ = server.accept()
                    with accepted:
                        host, peer_port = accepted.getpeername()[:2]
                        started = time.process_time()
                        peers.judge(f"ipv4:{host}:{peer_port}", port, "127.0.0.1")
                        cost.append(time.process_time() - started)
        peers.close()
        return statistics.median(cost)
    finally:
        for child in spawned:
            child.communicate(b"")


async def main(args: argparse.Namespace) -> None:
    store = MemoryStore(max_bytes=1 << 26)
    backends = {"": InstanceBackends(cas=store)}
    addresses = []
    peers = LocalPeers()
    async with trio.open_nursery() as nursery:
        for guarded in (False, True):
            bridge = TrioBridge()
            servicers = list(cache_servicers(bridge, Instances(backends), None))
            options = ServerOptions(
                address="127.0.0.1:0", grace_seconds=0.5, local_peers=peers if guarded else None
            )
            addresses.append(await nursery.start(GrpcServer(options, servicers, bridge).serve))
        per_call: dict[str, list[float]] = {"A": [], "B": []}
        for _ in range(args.rounds):
            for name, address in zip("AB", addresses, strict=True):
                per_call[name].append(await trio.to_thread.run_sync(_calls, address, args.calls))
        nursery.cancel_scope.cancel()
    peers.close()
    a, b = statistics.median(per_call["A"]), statistics.median(per_call["B"])
    ratios = [y / x for x, y in zip(per_call["A"], per_call["B"], strict=True)]
    print(f"rounds {args.rounds} x {args.calls} FindMissingBlobs calls on one channel (A, B, ...)")
    print(f"CPU per call  A (no guard) {a * 1e6:.1f} us   B (guard) {b * 1e6:.1f} us")
    print(f"B - A {(b - a) * 1e6:+.1f} us; per-round ratio median {statistics.median(ratios):.3f}")
    print(f"  (min {min(ratios):.3f}, max {max(ratios):.3f})")
    for children in (0, args.children):
        cost = _miss_cost(children, args.fds, 20)
        print(f"new connection, {children} descendants x {args.fds} fds: {cost * 1e3:.2f} ms CPU")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--children", type=int, default=16)
    parser.add_argument("--fds", type=int, default=100)
    trio.run(main, parser.parse_args())
