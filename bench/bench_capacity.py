"""lre's capacity and the latency it adds, on a real build's actions run as ``/bin/true``.

The actions of one clean Bazel build of the generated C workspace (bench/_replay.py;
kept under ``--recording-cache``, made with Bazel only when missing) are replayed
with their command replaced by ``/bin/true`` on the same input trees, at several
levels in flight (1 shows the latency of an idle lre), in two client shapes:
``bazel`` (Bazel 4's calls: FindMissingBlobs of the whole tree, Execute with
``skip_cache_lookup``, a ByteStream Read of the smallest recorded output) and
``buck2`` (``output_paths`` Commands; GetActionResult, FindMissingBlobs of what
it has not seen, BatchUpdateBlobs, Execute, BatchReadBlobs). Every pass uses
Actions lre has never seen (a fresh ``Action.salt``), so each is a cache miss.

Per level: actions/s over the steady part of the pass; lre's CPU per action,
the ``/bin/true`` processes' and this client's CPU; how busy the machine was;
added latency p50/p99 in two views:
``server`` = worker_completed - queued - the run, from the metadata lre returns;
``client`` = the Execute call to its final message, less the run.

A pass fails on a failed or cached action, outputs or printed text, a read
blob that differs, a GetActionResult hit, or lre's log calling an input
altered during the pass; the failure is printed, the blobs uploaded again and
the next pass runs; the exit status is 1 if any pass failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _client import LreProcess, ReapiClient, digest_of, local_config, process_cpu
from _replay import (
    BAZEL_WORKER,
    Metadata,
    Plan,
    Recording,
    action_tree,
    bazel_action,
    bazel_metadata,
    blob_key,
    cached_recording,
    read_blobs,
)

from lre.proto import REQUEST_METADATA_KEY, bs_grpc, re_grpc, re_pb2

SHAPES = ("bazel", "buck2")


#: Timestamps of ExecutedActionMetadata in the order lre sets them.
STAMPS = (
    "queued",
    "worker_start",
    "input_fetch_start",
    "input_fetch_completed",
    "execution_start",
    "execution_completed",
    "output_upload_start",
    "output_upload_completed",
    "worker_completed",
)


def capacity_worker(inflight: int) -> dict[str, object]:
    """The worker block: Bazel's settings, no cap on actions in flight, CPU
    capacity for ``inflight`` one-CPU actions (cpu_overcommit) and no memory
    budget, so only the client bounds concurrency."""
    cpus = os.cpu_count() or 1
    return BAZEL_WORKER | {
        "max_inflight_tasks": 0,
        "resources": {
            "cpu_overcommit": max(1.5, inflight / cpus),
            "memory_budget": 0,
            "live_memory_veto": False,
        },
    }


# ------------------------------------------------------------------ actions


@dataclass(slots=True)
class Template:
    """One recorded action turned into /bin/true for one client shape: its
    Action (without salt), its Command and that Command's blob, the digests
    of the Command and the input tree, and the blob read after it."""

    action: re_pb2.Action
    command: re_pb2.Command
    command_blob: bytes
    inputs: list[re_pb2.Digest]
    read: re_pb2.Digest | None


async def templates(client: ReapiClient, recording: Recording, shape: str) -> list[Template]:
    """The recorded actions as ``shape`` sends them (read from ``client``'s server)."""
    out = []
    for recorded in recording.actions:
        action, command, tree = await action_tree(client, recorded.action)
        del command.arguments[:]
        command.arguments.append("/bin/true")
        if shape == "buck2":
            paths = [*command.output_files, *command.output_directories]
            del command.output_files[:]
            del command.output_directories[:]
            command.output_paths.extend(sorted(paths))
            if action.HasField("platform") and not command.platform.properties:
                command.platform.CopyFrom(action.platform)
            action.ClearField("platform")
        data = command.SerializeToString()
        action.command_digest.CopyFrom(digest_of(data))
        out.append(
            Template(action, command, data, [digest_of(data), *tree[2:]], recorded.smallest_output)
        )
    return out


def buck2_metadata() -> Metadata:
    meta = re_pb2.RequestMetadata(
        tool_details=re_pb2.ToolDetails(tool_name="buck2", tool_version="0.1.0"),
        tool_invocation_id="capacity-bench",
    )
    return ((REQUEST_METADATA_KEY, meta.SerializeToString()),)


@dataclass(slots=True)
class Sample:
    """One finished action: the client's send and receive times and the result."""

    sent: float
    received: float
    result: re_pb2.ActionResult


def check_result(action: re_pb2.Digest, response: re_pb2.ExecuteResponse) -> re_pb2.ActionResult:
    """The result, after checking it is what ``/bin/true`` must give."""
    result = response.result
    problem = ""
    if response.status.code != 0 or result.exit_code != 0:
        problem = "failed"
    elif response.cached_result:
        problem = "came from the cache"
    elif result.output_files or result.output_directories or result.output_symlinks:
        problem = "produced outputs"
    elif result.stdout_raw or result.stderr_raw or result.stdout_digest.size_bytes:
        problem = "printed something"
    else:
        meta = result.execution_metadata
        stamps = [getattr(meta, f"{s}_timestamp").ToNanoseconds() for s in STAMPS]
        if 0 in stamps:
            problem = "lacks timestamps"
        elif stamps != sorted(stamps):
            problem = f"has unordered timestamps {stamps}"
    if problem:
        raise RuntimeError(f"action {action.hash} {problem}: {response}")
    return result


class Buck2Client:
    """The calls Buck2's OSS RE client makes for one action (see module docstring)."""

    def __init__(self, client: ReapiClient) -> None:
        self.client = client
        self.action_cache = re_grpc.ActionCacheStub(client.channel)
        self.known: set[str] = set()
        self.metadata = buck2_metadata()

    async def run(self, digest: re_pb2.Digest, blobs: dict[str, bytes], plan: Plan) -> Sample:
        client, meta = self.client, self.metadata
        try:
            await self.action_cache.GetActionResult(
                re_pb2.GetActionResultRequest(instance_name=client.instance, action_digest=digest),
                metadata=meta,
            )
            raise RuntimeError(f"action {digest.hash}: GetActionResult hit a new action")
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise
        unknown = [d for d in plan.tree if blob_key(d) not in self.known]
        missing: list[re_pb2.Digest] = []
        for start in range(0, len(unknown), 100):
            response = await client.cas.FindMissingBlobs(
                re_pb2.FindMissingBlobsRequest(
                    instance_name=client.instance, blob_digests=unknown[start : start + 100]
                ),
                metadata=meta,
            )
            missing.extend(response.missing_blob_digests)
        if blob_key(digest) not in {blob_key(d) for d in missing}:
            raise RuntimeError(f"action {digest.hash}: a new Action was not missing")
        uploads = await client.cas.BatchUpdateBlobs(
            re_pb2.BatchUpdateBlobsRequest(
                instance_name=client.instance,
                requests=[
                    re_pb2.BatchUpdateBlobsRequest.Request(digest=d, data=blobs[blob_key(d)])
                    for d in missing
                ],
            ),
            metadata=meta,
        )
        if any(r.status.code for r in uploads.responses):
            raise RuntimeError(f"action {digest.hash}: upload failed: {uploads}")
        self.known.update(blob_key(d) for d in unknown)
        sent = time.time()
        response = await client.execute(digest, meta)
        received = time.time()
        result = check_result(digest, response)
        if plan.read is not None:
            (data,) = await read_blobs(client, [plan.read], meta)
            if digest_of(data) != plan.read:
                raise RuntimeError(f"action {digest.hash}: read blob {plan.read.hash} differs")
        return Sample(sent, received, result)


# ------------------------------------------------------------------ passes


@dataclass(slots=True)
class Pass:
    """What one timed pass measured."""

    shape: str
    level: int
    samples: list[Sample]
    wall: float
    lre_cpu: float
    actions_cpu: float  # the /bin/true processes lre reaped
    client_cpu: float
    machine_busy: float  # fraction of all cores busy
    taints: int = 0  # inputs lre called altered during the pass


def _machine_busy() -> tuple[float, float]:
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return float(sum(values) - idle), float(sum(values))


async def run_pass(
    client: ReapiClient,
    shape: str,
    level: int,
    count: int,
    tag: str,
    templates_: list[Template],
    pid: int,
    buck2: Buck2Client,
) -> Pass:
    """``count`` fresh actions (salted with ``tag``) at ``level`` in flight."""
    plans: list[tuple[re_pb2.Digest, Plan]] = []
    blobs: dict[str, bytes] = {}
    for i in range(count):
        template = templates_[i % len(templates_)]
        action = re_pb2.Action()
        action.CopyFrom(template.action)
        action.salt = f"{tag}-{i}".encode()
        data = action.SerializeToString()
        digest = digest_of(data)
        blobs[blob_key(digest)] = data
        blobs[blob_key(template.inputs[0])] = template.command_blob
        metadata = bazel_metadata(digest, template.command) if shape == "bazel" else buck2.metadata
        plans.append((digest, Plan(digest, [digest, *template.inputs], metadata, template.read)))
    if shape == "bazel":  # Bazel's Actions are in the CAS before the pass
        await client.upload([blobs[blob_key(d)] for d, _ in plans])
    byte_stream = bs_grpc.ByteStreamStub(client.channel)
    samples: list[Sample] = []
    queue = iter(plans)

    async def loop() -> None:
        for digest, plan in queue:
            if shape == "bazel":
                call = await bazel_action(client, byte_stream, plan)
                result = check_result(digest, call.response)
                samples.append(Sample(call.sent, call.received, result))
            else:
                samples.append(await buck2.run(digest, blobs, plan))

    total0, reaped0 = process_cpu(pid)
    busy0, all0 = _machine_busy()
    own0 = os.times()
    started = time.monotonic()
    async with asyncio.TaskGroup() as tasks:  # the first failure cancels the rest
        for _ in range(level):
            tasks.create_task(loop())
    wall = time.monotonic() - started
    own1 = os.times()
    busy1, all1 = _machine_busy()
    total1, reaped1 = process_cpu(pid)
    if len(samples) != count:
        raise RuntimeError(f"{shape} {level}: {len(samples)} of {count} actions finished")
    return Pass(
        shape,
        level,
        samples,
        wall,
        total1 - total0,
        reaped1 - reaped0,
        own1.user + own1.system - own0.user - own0.system,
        (busy1 - busy0) / max(all1 - all0, 1.0),
    )


# ------------------------------------------------------------------ figures


def _ts(stamp: object) -> float:
    return float(stamp.ToNanoseconds()) / 1e9  # type: ignore[attr-defined]


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def throughput(p: Pass) -> float:
    """Completions per second between the first and last ``level`` completions."""
    done = sorted(s.received for s in p.samples)
    edge = min(p.level, len(done) // 4)
    first, last = edge, len(done) - 1 - edge
    return (last - first) / (done[last] - done[first])


def latency(p: Pass) -> dict[str, list[float]]:
    """Per action, in ms, the two added-latency views (the run left out)."""
    out: dict[str, list[float]] = {"server": [], "client": []}
    for s in p.samples:
        m = s.result.execution_metadata
        run = _ts(m.execution_completed_timestamp) - _ts(m.execution_start_timestamp)
        out["server"].append(
            (_ts(m.worker_completed_timestamp) - _ts(m.queued_timestamp) - run) * 1000
        )
        out["client"].append((s.received - s.sent - run) * 1000)
    return out


def figures(p: Pass) -> dict[str, float]:
    """The table's numbers for one pass (CPU in ms per action, latency in ms)."""
    n = len(p.samples)
    lat = latency(p)
    out = {
        "act/s": throughput(p),
        "lre ms": p.lre_cpu / n * 1000,
        "act ms": p.actions_cpu / n * 1000,
        "client ms": p.client_cpu / n * 1000,
        "taints": float(p.taints),
        "srv p50": _pct(lat["server"], 0.5),
        "srv p99": _pct(lat["server"], 0.99),
        "cli p50": _pct(lat["client"], 0.5),
        "cli p99": _pct(lat["client"], 0.99),
    }
    return out


def report(p: Pass) -> str:
    """A few lines on one pass, printed as it ends."""
    n = len(p.samples)
    f = figures(p)
    return "\n".join(
        [
            f"{p.shape} {p.level} in flight: {n} actions in {p.wall:.1f} s, "
            f"{f['act/s']:.1f} actions/s steady; machine {p.machine_busy * 100:.0f}% busy",
            f"  lre CPU {f['lre ms']:.2f} ms/action; its /bin/true processes "
            f"{f['act ms']:.2f}; client {f['client ms']:.2f}",
            f"  added latency ms: server p50 {f['srv p50']:.2f} p99 {f['srv p99']:.2f}; "
            f"client p50 {f['cli p50']:.2f} p99 {f['cli p99']:.2f}",
        ]
    )


# ------------------------------------------------------------------ main


def table(passes: list[Pass]) -> str:
    """One line per shape and level: medians over the rounds."""
    keys = sorted({(p.shape, p.level) for p in passes}, key=lambda k: (SHAPES.index(k[0]), k[1]))
    rows = []
    for shape, level in keys:
        group = [figures(p) for p in passes if (p.shape, p.level) == (shape, level)]
        row = {k: statistics.median(f[k] for f in group) for k in group[0]}
        rows.append((shape, level, row))
    if not rows:
        return "(no pass finished)"
    names = list(rows[0][2])
    lines = [f"{'shape':6s} {'level':>5s} " + " ".join(f"{k:>7s}" for k in names)]
    for shape, level, row in rows:
        lines.append(
            f"{shape:6s} {level:5d} "
            + " ".join(f"{row[k]:7.0f}" if k == "taints" else f"{row[k]:7.2f}" for k in names)
        )
    return "\n".join(lines)


#: What lre logs when it finds a hardlinked input changed by the action that
#: had it (``/bin/true`` changes nothing, so every such line is lre's mistake).
TAINT = b"altered its hardlinked input"


def taint_lines(log: Path, offset: int) -> list[bytes]:
    """The lines of lre's log after ``offset`` that report an altered input."""
    with open(log, "rb") as f:
        f.seek(offset)
        return [line for line in f if TAINT in line]


async def measure(
    lre: LreProcess, recording: Recording, args: argparse.Namespace
) -> tuple[list[Pass], list[str]]:
    """Every timed pass, and what went wrong (a pass that failed is left out;
    one during which lre reported inputs altered is kept and named)."""
    client = ReapiClient(lre.address)
    buck2 = Buck2Client(client)
    pid = lre.proc.pid
    failures: list[str] = []
    try:
        await recording.upload(client)
        shaped = {shape: await templates(client, recording, shape) for shape in args.shapes}
        if "bazel" in shaped:  # Bazel's Commands are in the CAS before its Execute
            await client.upload([t.command_blob for t in shaped["bazel"]])
        for shape in args.shapes:  # warm-up: every kind of action, untimed
            await run_pass(client, shape, 16, args.warmup, "warm", shaped[shape], pid, buck2)
        passes = []
        for r in range(args.rounds):
            order = args.shapes if r % 2 == 0 else args.shapes[::-1]
            for shape in order:
                for level in args.levels:
                    name = f"{shape} {level} in flight, round {r + 1}"
                    count = max(args.actions, 4 * level)
                    logged = lre.log_path.stat().st_size
                    try:
                        p = await run_pass(
                            client,
                            shape,
                            level,
                            count,
                            f"r{r}-{shape}-{level}",
                            shaped[shape],
                            pid,
                            buck2,
                        )
                    except* (RuntimeError, grpc.aio.AioRpcError) as group:
                        error = " ".join(str(group.exceptions[0]).split())
                        failures.append(f"{name}: {error[:500]}")
                        print(f"FAILED {failures[-1]}", flush=True)
                        p = None
                    taints = taint_lines(lre.log_path, logged)
                    if taints:
                        failures.append(
                            f"{name}: lre called {len(taints)} inputs altered by /bin/true "
                            f"and discarded them, e.g. {taints[0].decode(errors='replace').strip()}"
                        )
                        print(f"WRONG {failures[-1]}", flush=True)
                    if p is None or taints:  # put discarded blobs back for the next pass
                        await recording.upload(client)
                    if p is None:
                        continue
                    p.taints = len(taints)
                    print(report(p), flush=True)
                    passes.append(p)
        return passes, failures
    finally:
        await client.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--levels", default="1,16,64,256", help="actions in flight (default 1,16,64,256)"
    )
    ap.add_argument(
        "--actions", type=int, default=800, help="actions per pass, at least 4x the level (800)"
    )
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds of every pass (3)")
    ap.add_argument("--warmup", type=int, default=200, help="untimed actions per shape (200)")
    ap.add_argument("--shapes", default="bazel,buck2", help="client shapes (bazel,buck2)")
    ap.add_argument("--modules", type=int, default=40)
    ap.add_argument("--funcs", type=int, default=8)
    cache_home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    ap.add_argument(
        "--recording-cache",
        type=Path,
        default=cache_home / "lre-bench",
        help="where the recorded build is kept between runs (~/.cache/lre-bench)",
    )
    args = ap.parse_args()
    args.levels = [int(v) for v in args.levels.split(",")]
    args.shapes = [s for s in args.shapes.split(",") if s]
    if not set(args.shapes) <= set(SHAPES):
        ap.error(f"--shapes: {args.shapes!r}: expected names among {SHAPES}")
    began = time.monotonic()
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}", flush=True)
    recording = cached_recording(args.recording_cache, args.modules, args.funcs)
    most = max(args.levels)
    print(f"lre worker: {capacity_worker(most)}")
    with tempfile.TemporaryDirectory(prefix="lre-bench-capacity.") as tmp:
        home = Path(tmp) / "lre"
        with LreProcess(local_config(home, capacity_worker(most)), home) as lre:
            passes, failures = asyncio.run(measure(lre, recording, args))
    print()
    print(table(passes))
    print(
        "act/s: steady actions/s; lre ms: lre's CPU ms per action; client ms: "
        "this client's CPU; act ms: the /bin/true processes' CPU; taints: inputs lre wrongly "
        "called altered; srv/cli: added latency ms, server and client view (see --help)"
    )
    print(f"took {time.monotonic() - began:.0f} s")
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
