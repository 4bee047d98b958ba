"""What a no-op Execute costs a Python gRPC server before any lre logic: the
floor under the target of "<= 3 ms server CPU per action".

A bare grpc.aio server runs in a child process (``python
bench/bench_grpc_floor.py serve PORT MODE``). Its Execution service answers
every Execute with two Operations, EXECUTING and then done with a successful
ExecuteResponse, and keeps nothing:

- ``grpc``: nothing happens between the two messages;
- ``grpc+spawn``: ``/bin/true`` runs between them (``subprocess.run`` in a
  thread of the default executor), the least a server that really runs the
  action must add;
- ``bridge`` and ``bridge+spawn``: the same two Operations made by a Trio
  async generator and streamed through lre's own ``GrpcServer`` and
  ``TrioBridge`` (Trio in the main thread, grpc.aio on its asyncio thread,
  as in ``lre up``), with ``/bin/true`` run through ``trio.to_thread`` in the
  second: the floor of lre's architecture before any scheduler, CAS or
  worker code.

The client is ``bench/_client.py``'s (grpc.aio, 32 Execute calls in
flight), as bench_containment's no-op part uses against ``lre up``, so the
difference between these figures and that part's is what lre's own work costs
per action (Trio bridge, scheduler, CAS reads, worker, action cache).

Reported per mode: calls/s and the server process's CPU per call (user + sys,
children excluded), median of ``--runs`` runs of ``--calls`` calls after a
warm-up.

Run: ``.venv/bin/python bench/bench_grpc_floor.py [--runs 5] [--calls 2000]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import grpc
import psutil
from _client import ReapiClient, free_port

from lre.proto import operations_pb2, re_grpc, re_pb2

MODES = ("grpc", "grpc+spawn", "bridge", "bridge+spawn")
CONCURRENCY = 32


def _run_true() -> int:
    return subprocess.run(["/bin/true"], stdin=subprocess.DEVNULL, check=False).returncode


def operation(request: re_pb2.ExecuteRequest, exit_code: int | None) -> operations_pb2.Operation:
    """The EXECUTING Operation of ``request`` (``exit_code`` None), or the
    done one with a result of ``exit_code``."""
    metadata = re_pb2.ExecuteOperationMetadata(
        stage=re_pb2.ExecutionStage.EXECUTING, action_digest=request.action_digest
    )
    message = operations_pb2.Operation(name=f"floor/operations/{request.action_digest.hash}")
    if exit_code is not None:
        metadata.stage = re_pb2.ExecutionStage.COMPLETED
        response = re_pb2.ExecuteResponse()
        response.result.exit_code = exit_code
        message.done = True
        message.response.Pack(response)
    message.metadata.Pack(metadata)
    return message


class FloorExecution(re_grpc.ExecutionServicer):
    """Two Operations per Execute; with ``spawn``, /bin/true runs in between."""

    def __init__(self, spawn: bool) -> None:
        self.spawn = spawn

    async def Execute(
        self, request: re_pb2.ExecuteRequest, context: Any
    ) -> AsyncIterator[operations_pb2.Operation]:
        yield operation(request, None)
        code = 0
        if self.spawn:
            code = await asyncio.get_running_loop().run_in_executor(None, _run_true)
        yield operation(request, code)


class BridgedExecution(re_grpc.ExecutionServicer):
    """The two Operations of ``FloorExecution``, made in Trio behind lre's bridge."""

    def __init__(self, bridge: Any, spawn: bool) -> None:
        self.bridge = bridge
        self.spawn = spawn

    def register(self, server: grpc.aio.Server) -> None:
        re_grpc.add_ExecutionServicer_to_server(self, server)

    def Execute(
        self, request: re_pb2.ExecuteRequest, context: Any
    ) -> AsyncIterator[operations_pb2.Operation]:
        import trio

        spawn = self.spawn

        async def operations() -> AsyncIterator[operations_pb2.Operation]:
            yield operation(request, None)
            code = await trio.to_thread.run_sync(_run_true) if spawn else 0
            yield operation(request, code)

        stream: AsyncIterator[operations_pb2.Operation] = self.bridge.stream(operations)
        return stream


async def serve_bridged(port: int, spawn: bool) -> None:
    """(Trio) lre's GrpcServer and TrioBridge around ``BridgedExecution``."""
    import trio

    from lre.service._bridge import TrioBridge
    from lre.service._server import GrpcServer, ServerOptions

    bridge = TrioBridge()
    server = GrpcServer(
        ServerOptions(address=f"127.0.0.1:{port}"), [BridgedExecution(bridge, spawn)], bridge
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        print("ready", flush=True)
        await trio.sleep_forever()


async def serve(port: int, mode: str) -> None:
    server = grpc.aio.server()
    re_grpc.add_ExecutionServicer_to_server(FloorExecution(mode == "grpc+spawn"), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


async def measure(address: str, server: psutil.Process, calls: int, tag: str) -> dict[str, float]:
    client = ReapiClient(address)
    try:
        pending = iter(range(calls))

        async def loop() -> None:
            for i in pending:
                digest = re_pb2.Digest(hash=f"{tag}{i:060d}", size_bytes=1)
                response = await client.execute(digest)
                assert response.result.exit_code == 0, response

        before = server.cpu_times()
        started = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(CONCURRENCY)))
        wall = time.perf_counter() - started
        after = server.cpu_times()
    finally:
        await client.close()
    cpu = (after.user - before.user) + (after.system - before.system)
    return {"calls_per_s": calls / wall, "server_cpu_ms_per_call": cpu / calls * 1000}


def bench_mode(mode: str, runs: int, calls: int) -> list[dict[str, float]]:
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, __file__, "serve", str(port), mode], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"floor server ({mode}) did not start")
        server = psutil.Process(child.pid)
        address = f"127.0.0.1:{port}"
        asyncio.run(measure(address, server, min(calls, 300), "warm"))
        return [asyncio.run(measure(address, server, calls, f"r{run}")) for run in range(runs)]
    finally:
        child.terminate()
        child.wait(timeout=30)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        if sys.argv[3].startswith("bridge"):
            import trio

            trio.run(serve_bridged, int(sys.argv[2]), sys.argv[3] == "bridge+spawn")
        else:
            asyncio.run(serve(int(sys.argv[2]), sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    for mode in MODES:
        rows = bench_mode(mode, args.runs, args.calls)
        for key in rows[0]:
            values = [row[key] for row in rows]
            print(
                f"floor {mode} {key}: median {statistics.median(values):.2f} "
                f"(runs: {', '.join(f'{v:.2f}' for v in values)})"
            )
    print(
        f"{CONCURRENCY} Execute calls in flight; compare with bench_containment's "
        "no-op part (lre up, same client): the difference is lre's own work per action"
    )


if __name__ == "__main__":
    main()
