"""What fetching every output costs Bazel 4.2.3, and what it prints
when a blob it relied on went.

Part 1 (download volume against cache size): clean remote builds of the
generated C workspace through lre, in alternating rounds, with the
lre.bazelrc `lre up` writes (Bazel 4.2.3 then downloads every output) and
with the same plus `--remote_download_toplevel` (builds without the bytes).
Per build: wall seconds, the bytes Bazel put under bazel-out (what it
downloaded, plus what it wrote itself), and the bytes in lre's CAS.

Part 2 (the messages): a build without the bytes, `lre cache gc --to 0
--force` through the running lre, one source edited, the next build: the
lines Bazel 4.2.3 really prints. The same after a gc without --force, and
with lre's own config after the forced gc.

    .venv/bin/python bench/bench_cache_contract.py [--rounds 3] [--modules 12]
        [--project generated|brotli] [--skip-volume] [--skip-messages]

Needs Bazel at /usr/bin/bazel. Servers listen on 127.0.0.1 and stop with
the script; everything lives under a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tests.cli.running_lre import LreHome, detached, private_home
from tests.e2e._bazel import BazelSession
from tests.e2e._workspace import generate_workspace


def tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, names in os.walk(root, followlinks=False):
        for name in names:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path):
                total += os.stat(path).st_size
    return total


def cas_bytes(home: LreHome, cwd: Path) -> int:
    result = home.run("cache", "--json", cwd=cwd)
    document = json.loads(result.stdout)
    return sum(int(s["bytes"]) for s in document["stores"] if s["kind"] == "cas")


def interesting(output: str) -> list[str]:
    keep = ("ERROR", "error", "bulk transfer", "exist remotely", "Exit", "FAILED", "not exist")
    return [line for line in output.splitlines() if any(k in line for k in keep)][:12]


def _project(tmp: Path, project: str, modules: int) -> tuple[Path, str, str]:
    """(workspace root, target, description) of the workspace to measure."""
    if project == "brotli":
        import real_project

        sdist = real_project.fetch_sdist(real_project.default_cache_dir())
        ws = real_project.generate_project_workspace(sdist, tmp / "brotli")
        return ws.root, "//...", f"brotli {real_project.VERSION} ({real_project.SPAWNS} spawns)"
    generated = generate_workspace(tmp / "ws", modules=modules, funcs=3)
    return generated.root, generated.target, f"generated C, {generated.spawn_count} spawns"


def part_one(tmp: Path, rounds: int, modules: int, project: str, out: list[str]) -> None:
    root, target, what = _project(tmp, project, modules)
    (tmp / "lre1").mkdir()
    home = private_home(tmp / "lre1", max_bytes="4GiB")
    modes = ("lre config (download all)", "+ --remote_download_toplevel")
    rows: dict[str, list[tuple[float, int, int]]] = {k: [] for k in modes}
    with detached(home, root), BazelSession(root, tmp / "bazel1") as bazel:
        bazel.build([target]).check()  # warm the toolchain and lre's cache
        for r in range(rounds):
            order = list(rows) if r % 2 == 0 else list(reversed(rows))
            for mode in order:
                flags = ["--noremote_accept_cached"]
                if "toplevel" in mode:
                    flags.append("--remote_download_toplevel")
                bazel.clean()
                started = time.monotonic()
                built = bazel.build([target], flags)
                wall = time.monotonic() - started
                built.check()
                out_dir = root / "bazel-out"
                rows[mode].append((wall, tree_bytes(out_dir.resolve()), cas_bytes(home, root)))
    out.append(f"workspace: {what}, {rounds} rounds")
    for mode, values in rows.items():
        walls = [v[0] for v in values]
        out.append(
            f"{mode}: clean build median {statistics.median(walls):.2f} s "
            f"({', '.join(f'{w:.2f}' for w in walls)}); bazel-out "
            f"{statistics.median(v[1] for v in values) / 1e6:.2f} MB; lre CAS "
            f"{statistics.median(v[2] for v in values) / 1e6:.2f} MB"
        )
    pairs = [a[0] / b[0] for a, b in zip(*rows.values(), strict=True)]
    out.append(
        "per-pair wall ratio (download all / toplevel): "
        + ", ".join(f"{p:.3f}" for p in pairs)
        + f"; median {statistics.median(pairs):.3f}"
    )


def part_two(tmp: Path, out: list[str]) -> None:
    ws = generate_workspace(tmp / "ws2", modules=4, funcs=1, seed=7)
    (tmp / "lre2").mkdir()
    home = private_home(tmp / "lre2")
    source = next((ws.root / "src").glob("mod_00.c"))
    with detached(home, ws.root), BazelSession(ws.root, tmp / "bazel2") as bazel:
        bazel.build([ws.target], ["--remote_download_toplevel"]).check()
        forced = home.run("cache", "gc", "--to", "0", "--force", cwd=ws.root)
        out.append("$ lre cache gc --to 0 --force   (lre running)")
        out.extend("  " + line for line in forced.stdout.splitlines())
        source.write_text(source.read_text() + "\nint lre_bench_edit_1(void) { return 1; }\n")
        broken = bazel.build([ws.target], ["--remote_download_toplevel"])
        out.append(f"next build without the bytes: exit {broken.returncode}")
        out.extend("  " + line for line in interesting(broken.output))
        again = bazel.build([ws.target], ["--remote_download_toplevel"])
        out.append(f"the same build again: exit {again.returncode}")
        out.extend("  " + line for line in interesting(again.output))
        bazel.clean()
        healed = bazel.build([ws.target], ["--remote_download_toplevel"])
        out.append(f"after `bazel clean`: exit {healed.returncode}")
        # lre's own config (download all): a forced gc breaks nothing.
        bazel.build([ws.target]).check()
        home.run("cache", "gc", "--to", "0", "--force", cwd=ws.root)
        source.write_text(source.read_text() + "\nint lre_bench_edit_2(void) { return 2; }\n")
        fine = bazel.build([ws.target])
        out.append(f"lre's config, after a forced gc and an edit: exit {fine.returncode}")
        out.extend("  " + line for line in interesting(fine.output))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modules", type=int, default=12)
    parser.add_argument("--skip-volume", action="store_true")
    parser.add_argument("--skip-messages", action="store_true")
    parser.add_argument("--project", choices=("generated", "brotli"), default="generated")
    args = parser.parse_args()
    out: list[str] = [f"# bench_cache_contract {time.strftime('%Y-%m-%d %H:%M:%S %Z')}"]
    with tempfile.TemporaryDirectory(prefix="lre-bench29-") as tmp:
        if not args.skip_volume:
            part_one(Path(tmp), args.rounds, args.modules, args.project, out)
        if not args.skip_messages:
            part_two(Path(tmp), out)
    print("\n".join(out))


if __name__ == "__main__":
    main()
