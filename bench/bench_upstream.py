"""Cached Bazel builds through a laptop lre in front of a cluster lre.

Three lre processes (``python -m lre up --no-tui --no-client-config``), all
on 127.0.0.1 with every file under a temp dir:

- the *cluster*: a plain lre holding the team's cache;
- the *laptop*: ``fast_slow`` CAS and action cache over the cluster
  (configs like tests/upstream's, ``upload_policy`` never);
- a *plain* lre without an upstream (the baseline).

First the generated C workspace is built once locally with
``--remote_cache`` pointing at the cluster and once at the plain lre (fills
both caches). Then per round, each a ``bazel clean`` plus a timed
``bazel build --remote_cache=...`` that must be all remote cache hits (and
the binary's checksum is checked):

- ``upstream_only``: a laptop started with an empty local tier (every
  result and output is read through from the cluster);
- ``local_tier``: the same laptop again (now served from its local tier);
- ``no_upstream``: the plain lre.

Run::

    .venv/bin/python bench/bench_upstream.py --reps 5 [--json bench/results/upstream.json]

Target: median local_tier <= median no_upstream (the upstream costs nothing
when the local tier has everything).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lre.proto import re_grpc, re_pb2
from tests.e2e._bazel import BazelSession, ProcessSummary
from tests.e2e._workspace import Workspace, generate_workspace
from tests.upstream._cluster import laptop_config_text, upstream_config_text


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class LreProcess:
    """``python -m lre up`` on a free port; stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, config_text: str, root: Path, name: str) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.config = root / f"{name}.json5"
        self.config.write_text(config_text)
        self.port = _free_port()
        self.log = open(root / f"{name}.log", "w")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lre",
                "up",
                "--no-tui",
                "--no-client-config",
                "--config",
                str(self.config),
                "--port",
                str(self.port),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=root,
        )
        self._wait_ready()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"lre exited early; see {self.log.name}")
            try:
                with grpc.insecure_channel(self.address) as channel:
                    re_grpc.CapabilitiesStub(channel).GetCapabilities(
                        re_pb2.GetCapabilitiesRequest(), timeout=1
                    )
                return
            except grpc.RpcError:
                time.sleep(0.2)
        raise RuntimeError(f"lre did not start within 60 s; see {self.log.name}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def _cache_flags(address: str, instance: str) -> list[str]:
    return [
        f"--remote_cache=grpc://{address}",
        f"--remote_instance_name={instance}",
        "--remote_timeout=300",
        "--jobs=8",
    ]


def _build(bazel: BazelSession, ws: Workspace, flags: list[str], *, cached: bool) -> float:
    bazel.clean()
    start = time.monotonic()
    result = bazel.build([ws.target], flags)
    elapsed = time.monotonic() - start
    summary: ProcessSummary | None = result.summary
    if result.returncode != 0 or summary is None:
        tail = "\n".join(result.output.splitlines()[-30:])
        raise RuntimeError(f"bazel build {flags} failed:\n{tail}")
    if cached and summary.count("remote cache hit") != summary.spawns:
        raise RuntimeError(f"not every spawn was a remote cache hit: {summary}")
    out = subprocess.run([ws.binary, "100"], capture_output=True, text=True, check=True)
    if out.stdout.strip() != ws.expected_checksum(100):
        raise RuntimeError(f"wrong checksum: {out.stdout!r}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--modules", type=int, default=40)
    ap.add_argument("--funcs", type=int, default=8)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    samples: dict[str, list[float]] = {"upstream_only": [], "local_tier": [], "no_upstream": []}
    with tempfile.TemporaryDirectory(prefix="lre-bench-upstream-") as tmp:
        work = Path(tmp)
        ws = generate_workspace(work / "ws", modules=args.modules, funcs=args.funcs)
        cluster = LreProcess(upstream_config_text(work / "cluster"), work / "cluster", "cluster")
        plain = LreProcess(upstream_config_text(work / "plain"), work / "plain", "plain")
        laptop: LreProcess | None = None
        try:
            with BazelSession(ws.root, work / "bazel-root", max_idle_secs=600) as bazel:
                bazel.build([ws.target])  # warm-up
                _build(bazel, ws, _cache_flags(cluster.address, "team"), cached=False)
                _build(bazel, ws, _cache_flags(plain.address, "team"), cached=False)
                for rep in range(args.reps):
                    root = work / f"laptop{rep}"
                    laptop = LreProcess(
                        laptop_config_text(root, f"grpc://{cluster.address}"), root, "laptop"
                    )
                    flags = _cache_flags(laptop.address, "team")
                    samples["upstream_only"].append(_build(bazel, ws, flags, cached=True))
                    samples["local_tier"].append(_build(bazel, ws, flags, cached=True))
                    laptop.stop()
                    laptop = None
                    shutil.rmtree(root, ignore_errors=True)
                    samples["no_upstream"].append(
                        _build(bazel, ws, _cache_flags(plain.address, "team"), cached=True)
                    )
                    print(
                        f"round {rep + 1}: "
                        + ", ".join(f"{k}={v[-1]:.2f}s" for k, v in samples.items()),
                        flush=True,
                    )
        finally:
            for process in (laptop, cluster, plain):
                if process is not None:
                    process.stop()
    medians = {k: statistics.median(v) for k, v in samples.items()}
    for key, value in medians.items():
        print(f"median {key}: {value:.2f} s")
    ok = medians["local_tier"] <= medians["no_upstream"]
    print(f"target: local_tier <= no_upstream: {ok}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"samples_s": samples, "median_s": medians, "spawns": ws.spawn_count}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
