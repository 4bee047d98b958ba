"""Clean Bazel builds of the generated C workspace: local against one or more
already running REAPI servers (for example two lre configurations), no peer.

Start the servers first, e.g.::

    LRE_HOME=$(mktemp -d) .venv/bin/lre up --detach --no-client-config --port 50091
    LRE_HOME=$(mktemp -d) .venv/bin/lre up --detach --no-client-config --port 50092 \\
        --config other.json5   # with global.status.address "" (one status port only)
    .venv/bin/python bench/bench_bazel_ab.py default=127.0.0.1:50091 other=127.0.0.1:50092

Every round builds the workspace cleanly once locally (sandboxed) and once
through each server with ``--noremote_accept_cached`` and the flags
``lre.bazelrc`` gives a Bazel 4 user. The order is reversed every other
round (Bazel's JVM keeps getting faster, which favours whatever comes later)
and ``--warmup`` rounds are not timed. Prints every round, then per server
the ratio of medians to local and the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e._bazel import BazelSession
from tests.e2e._workspace import generate_workspace


def remote_flags(address: str) -> list[str]:
    return [
        f"--remote_executor=grpc://{address}",
        "--remote_instance_name=main",
        "--spawn_strategy=remote",
        "--jobs=16",
        "--remote_timeout=300",
        "--remote_default_exec_properties=cpu_count=1",
        "--remote_default_exec_properties=OSFamily=Linux",
        "--remote_download_toplevel",
        "--noremote_accept_cached",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("servers", nargs="+", metavar="NAME=HOST:PORT")
    parser.add_argument("--rounds", type=int, default=14, help="timed rounds (default 14)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds (default 2)")
    parser.add_argument("--modules", type=int, default=40)
    args = parser.parse_args()
    servers = dict(item.split("=", 1) for item in args.servers)
    names = ["local", *servers]
    samples: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="lre-bench-ab-") as tmp:
        work = Path(tmp)
        ws = generate_workspace(work / "ws", modules=args.modules, funcs=8)
        with BazelSession(ws.root, work / "bazel-root", max_idle_secs=600) as bazel:
            bazel.build([ws.target])
            for round_ in range(args.warmup + args.rounds):
                order = names if round_ % 2 == 0 else names[::-1]
                took: dict[str, float] = {}
                for name in order:
                    bazel.clean()
                    flags = [] if name == "local" else remote_flags(servers[name])
                    started = time.monotonic()
                    result = bazel.build([ws.target], flags)
                    took[name] = time.monotonic() - started
                    if result.returncode != 0:
                        tail = "\n".join(result.output.splitlines()[-20:])
                        raise RuntimeError(f"{name} build failed:\n{tail}")
                if round_ < args.warmup:
                    continue
                for name in names:
                    samples[name].append(took[name])
                print(
                    f"round {round_ - args.warmup + 1} ({' -> '.join(order)}): "
                    + ", ".join(f"{name}={took[name]:.2f}s" for name in names),
                    flush=True,
                )
    local = statistics.median(samples["local"])
    print(f"local: median {local:.2f} s")
    for name in servers:
        median = statistics.median(samples[name])
        paired = statistics.median(
            remote / base for remote, base in zip(samples[name], samples["local"], strict=True)
        )
        print(
            f"{name}: median {median:.2f} s = {median / local:.3f}x local; "
            f"per-round ratios: median {paired:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
