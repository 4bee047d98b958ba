"""A small generic REAPI client for benchmarks, and a way to run ``lre up``.

- :class:`LreProcess`: start ``python -m lre up --config FILE --no-tui
  --no-client-config --port P`` with ``LRE_HOME`` set to a scratch directory,
  wait until it listens, stop it with SIGTERM (SIGKILL after a grace period).
- :func:`thread_cpu`: a process's CPU per thread; :func:`process_cpu` and
  :func:`own_cpu`: a process's own CPU and that of the children it reaped.
- :func:`local_config`: an lre config with everything under one directory.
- :class:`Monitor`: a process tree's peaks, or a sleeper's lateness, sampled
  in a process of its own.
- :class:`ReapiClient` (grpc.aio, asyncio): upload blobs (BatchUpdateBlobs),
  build and upload a Command/Action with an empty input root, Execute and
  wait for the final ``ExecuteResponse``.

Benchmarks call ``asyncio.run(...)``; the client needs only ``lre.proto``,
so it works against any REAPI server.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import grpc

from lre.config import SchedulerResourceSpec
from lre.proto import operations_pb2, re_grpc, re_pb2

MAX_BATCH_BYTES = 3 << 20


def digest_of(data: bytes) -> re_pb2.Digest:
    return re_pb2.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_NUMBERED = re.compile(r"[ _-]*\d+$")


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Per thread of ``pid``: (its name, CPU seconds). The main thread is "main";
    numbered pools ("Trio thread 19", "Trio thread 21") share one name. A
    thread that ends while it is read is left out."""
    ticks = os.sysconf("SC_CLK_TCK")
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            stat = (task / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        tid = int(task.name)
        name = "main" if tid == pid else _NUMBERED.sub("", comm)
        threads[tid] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return threads


def process_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) of process ``pid`` (all its threads, live
    and ended) and of the children it has reaped (for lre: its actions), from
    ``/proc/<pid>/stat``. Raises ``OSError`` when the process is gone."""
    ticks = os.sysconf("SC_CLK_TCK")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks, (int(fields[13]) + int(fields[14])) / ticks


def own_cpu() -> tuple[float, float]:
    """CPU seconds of this process and of the children it has waited for."""
    times = os.times()
    return times.user + times.system, times.children_user + times.children_system


class LreProcess:
    """``lre up`` in a child process; use as a context manager.

    Raises ``RuntimeError`` (with the tail of lre's output) if it exits or does
    not listen within ``start_timeout`` seconds.
    """

    def __init__(
        self,
        config_text: str,
        home: Path,
        *,
        start_timeout: float = 60,
        python: str = sys.executable,
    ) -> None:
        """``python``: the interpreter whose ``lre`` runs (another checkout's
        venv, for an A/B against an older lre in the same run)."""
        self.home = home
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        home.mkdir(parents=True, exist_ok=True)
        self.config_path = home / "lre.json5"
        self.config_path.write_text(config_text)
        self.log_path = home / "lre-bench.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ) | {"LRE_HOME": str(home), "XDG_STATE_HOME": str(home / "state")}
        self.proc = subprocess.Popen(
            [
                python,
                "-m",
                "lre",
                "up",
                "--config",
                str(self.config_path),
                "--no-tui",
                "--no-client-config",
                "--port",
                str(self.port),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=home,
        )
        deadline = time.monotonic() + start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lre exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"lre did not listen within {start_timeout}s:\n{self.tail()}")
            time.sleep(0.1)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 20) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> LreProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ReapiClient:
    """REAPI calls against ``address`` (plaintext, loopback). Use inside asyncio."""

    def __init__(self, address: str, instance: str = "") -> None:
        self.instance = instance
        self.channel = grpc.aio.insecure_channel(
            address,
            options=[
                ("grpc.max_receive_message_length", 64 << 20),
                ("grpc.max_send_message_length", 64 << 20),
            ],
        )
        self.cas = re_grpc.ContentAddressableStorageStub(self.channel)
        self.execution = re_grpc.ExecutionStub(self.channel)
        self.empty_dir = re_pb2.Directory().SerializeToString()

    async def close(self) -> None:
        await self.channel.close()

    async def upload(self, blobs: Sequence[bytes]) -> list[re_pb2.Digest]:
        """Upload ``blobs`` in batches; raises ``RuntimeError`` on a per-blob error."""
        digests = [digest_of(b) for b in blobs]
        batch: list[re_pb2.BatchUpdateBlobsRequest.Request] = []
        size = 0

        async def send() -> None:
            if not batch:
                return
            response = await self.cas.BatchUpdateBlobs(
                re_pb2.BatchUpdateBlobsRequest(instance_name=self.instance, requests=batch)
            )
            for r in response.responses:
                if r.status.code != 0:
                    raise RuntimeError(f"upload of {r.digest.hash} failed: {r.status.message}")

        for data, digest in zip(blobs, digests, strict=True):
            if size + len(data) > MAX_BATCH_BYTES and batch:
                await send()
                batch, size = [], 0
            batch.append(re_pb2.BatchUpdateBlobsRequest.Request(digest=digest, data=data))
            size += len(data)
        await send()
        return digests

    async def prepare(
        self,
        arguments: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        platform: Mapping[str, str] | None = None,
        timeout_s: float = 0,
        do_not_cache: bool = True,
        outputs: Sequence[str] = (),
    ) -> re_pb2.Digest:
        """Upload the Command (``outputs``: its output paths), an empty input
        root and the Action; returns the action digest."""
        props = sorted((platform or {}).items())
        command = re_pb2.Command(
            arguments=list(arguments),
            output_paths=list(outputs),
            environment_variables=[
                re_pb2.Command.EnvironmentVariable(name=k, value=v)
                for k, v in sorted((env or {}).items())
            ],
            platform=re_pb2.Platform(
                properties=[re_pb2.Platform.Property(name=k, value=v) for k, v in props]
            ),
        )
        command_bytes = command.SerializeToString()
        action = re_pb2.Action(
            command_digest=digest_of(command_bytes),
            input_root_digest=digest_of(self.empty_dir),
            do_not_cache=do_not_cache,
            platform=command.platform,
        )
        if timeout_s:
            action.timeout.FromNanoseconds(int(timeout_s * 1e9))
        action_bytes = action.SerializeToString()
        await self.upload([command_bytes, self.empty_dir, action_bytes])
        return digest_of(action_bytes)

    async def execute(
        self,
        action_digest: re_pb2.Digest,
        metadata: Sequence[tuple[str, str | bytes]] | None = None,
    ) -> re_pb2.ExecuteResponse:
        """Execute and wait for the final response (``metadata``: gRPC headers
        to send, e.g. a RequestMetadata). gRPC errors propagate as
        ``grpc.aio.AioRpcError``; an operation ending in an error carries it in
        ``ExecuteResponse.status``."""
        request = re_pb2.ExecuteRequest(
            instance_name=self.instance, action_digest=action_digest, skip_cache_lookup=True
        )
        last: operations_pb2.Operation | None = None
        async for operation in self.execution.Execute(request, metadata=metadata):
            last = operation
            if operation.done:
                break
        if last is None or not last.done:
            raise RuntimeError("Execute stream ended without a finished operation")
        response = re_pb2.ExecuteResponse()
        if last.HasField("response"):
            last.response.Unpack(response)
        else:
            response.status.CopyFrom(last.error)
        return response


#: Resource keys of the simple scheduler (``schedulers[].simple.resources``).
SCHEDULER_RESOURCE_KEYS = tuple(f.name for f in dataclasses.fields(SchedulerResourceSpec))


def local_config(home: Path, worker: Mapping[str, object] | None = None) -> str:
    """An lre config (JSON) with everything under ``home``: filesystem CAS and
    action cache, one simple scheduler adding cpu_count=1, one local worker with
    ``worker`` merged into its block (e.g. ``{"max_inflight_tasks": 0,
    "resources": {...}, "jobserver": {"enabled": False}}``). The scheduler's
    resource keys given among the worker's ``resources`` (``cold_memory``,
    ``ladder``, ...) go to the simple scheduler's ``resources``, where lre
    reads them."""
    import json

    local: dict[str, object] = {
        "name": "local",
        "scheduler": "queue",
        "cas_store": "cas",
        "work_directory": str(home / "work"),
    }
    local.update(worker or {})
    moved: dict[str, object] = {}
    resources = local.get("resources")
    if isinstance(resources, dict):
        kept = dict(resources)
        for key in SCHEDULER_RESOURCE_KEYS:
            if key in kept:
                moved[key] = kept.pop(key)
        local["resources"] = kept
    simple: dict[str, object] = {"ac_store": "ac", "cas_store": "cas"}
    if moved:
        simple["resources"] = moved
    config = {
        "stores": [
            {
                "name": "cas",
                "filesystem": {
                    "content_path": str(home / "cas"),
                    "temp_path": str(home / "tmp" / "cas"),
                },
            },
            {
                "name": "ac",
                "filesystem": {
                    "content_path": str(home / "ac"),
                    "temp_path": str(home / "tmp" / "ac"),
                },
            },
        ],
        "schedulers": [
            {
                "name": "main",
                "property_modifier": {
                    "modifications": [{"add": {"name": "cpu_count", "value": "1"}}],
                    "scheduler": "queue",
                },
            },
            {"name": "queue", "simple": simple},
        ],
        "workers": [{"local": local}],
        "servers": [
            {
                "name": "main",
                "listener": {"address": "127.0.0.1:0"},
                "instances": [
                    {
                        "instance_name": "*",
                        "cas_store": "cas",
                        "ac_store": "ac",
                        "scheduler": "main",
                    }
                ],
            }
        ],
        "global": {"state_dir": str(home / "state"), "status": {"address": ""}},
    }
    return json.dumps(config, indent=2)


# --------------------------------------------------------------------- monitors
#
# Separate processes, so their work does not compete with the client's event loop
# for the GIL: `python bench/_client.py tree PID INTERVAL OUT` samples the process
# tree under PID (excluding PID itself): peak process count and peak RSS sum;
# `python bench/_client.py sleeper OUT` sleeps 10 ms in a loop and records how
# late each wake-up was. Both stop on SIGTERM and write JSON to OUT.

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                found.extend(int(child) for child in f.read().split())
        except OSError:
            continue
    return found


def _walk(root: int) -> Iterator[tuple[int, bytes, list[bytes]]]:
    """``(pid, /proc/PID/stat, its fields from the state on)`` of every live process
    under ``root`` (not ``root`` itself; zombies left out).

    Walks ``/proc/PID/task/TID/children`` down from ``root``, so a pass costs
    in proportion to the tree, not to every process on the machine.
    """
    pending = _children(root)
    while pending:
        pid = pending.pop()
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            continue
        yield pid, data, fields
        pending.extend(_children(pid))


def _descendants(root: int) -> tuple[int, int, int]:
    """Live processes under ``root`` (not counting it), how many of them are
    running or runnable (state R), and their RSS sum."""
    count = running = total = 0
    for _, _, fields in _walk(root):
        count += 1
        running += fields[0] == b"R"
        total += int(fields[21]) * _PAGE
    return count, running, total


def stop_on_sigterm() -> Callable[[], bool]:
    """For a monitor's loop: the returned call says whether SIGTERM came."""
    stopped: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    return lambda: bool(stopped)


def _tree_monitor(root: int, interval: float, out: str) -> None:
    import json

    stopped = stop_on_sigterm()
    peak_count = peak_running = peak_rss = samples = 0
    running_samples: dict[int, int] = {}  # running processes -> samples that saw that many
    while not stopped():
        count, running, rss = _descendants(root)
        peak_count, peak_rss = max(peak_count, count), max(peak_rss, rss)
        peak_running = max(peak_running, running)
        running_samples[running] = running_samples.get(running, 0) + 1
        samples += 1
        time.sleep(interval)
    Path(out).write_text(
        json.dumps(
            {
                "peak_processes": peak_count,
                "peak_running": peak_running,
                "peak_rss_bytes": peak_rss,
                "samples": samples,
                "running_samples": running_samples,
            }
        )
    )


def _sleeper(out: str) -> None:
    import json

    stopped = stop_on_sigterm()
    late: list[float] = []
    while not stopped():
        t = time.perf_counter()
        time.sleep(0.010)
        late.append(time.perf_counter() - t - 0.010)
    late.sort()
    p99 = late[min(len(late) - 1, int(len(late) * 0.99))] if late else 0.0
    Path(out).write_text(
        json.dumps({"p99_late_s": p99, "max_late_s": max(late, default=0.0), "wakeups": len(late)})
    )


class Monitor:
    """Runs ``script KIND ARGS... OUT`` (by default one of the monitors above);
    ``stop()`` sends SIGTERM and returns the JSON it wrote to OUT."""

    def __init__(self, kind: str, *args: str, out: Path, script: str = __file__) -> None:
        self.out = out
        self.proc = subprocess.Popen([sys.executable, script, kind, *args, str(out)])

    def stop(self) -> dict[str, float]:
        import json

        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        return dict(json.loads(self.out.read_text()))


if __name__ == "__main__":
    if sys.argv[1] == "tree":
        _tree_monitor(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "sleeper":
        _sleeper(sys.argv[2])
    else:
        raise SystemExit(f"unknown monitor {sys.argv[1]!r}")
