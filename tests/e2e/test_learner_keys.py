"""The learner's kind keys on real builds (Debian's Bazel 4.2.3 through lre).

Two repositories with the same labels (``//:mod_00``.. and a ``//:pair``
library with two sources in each) built through one lre: each repository's
actions are learned under its own keys (the ``x-lre-repository`` header that
``lre up`` writes into ``lre.bazelrc``), the two compiles of ``//:pair`` under
two keys, and an edit-rebuild adds no key. A copy of the first repository
at another path sends another repository header yet gets only cache hits:
the header changes no action key.

With ``LRE_LEARNER_KEYS_REPORT=<file>`` the test also writes what it measured
(keys, peak-RSS spread per key, cold starts per build, under the key before
and after repositories and outputs were told apart) as JSON to that file.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests._support.configs import app_config_text
from tests._support.servers import free_port
from tests.cli._lre import run_lre
from tests.e2e._bazel import BazelSession, require_bazel
from tests.e2e._workspace import Workspace, generate_workspace

pytestmark = [pytest.mark.slow, pytest.mark.bazel]

MIB = 1 << 20
#: lre's default cold reservation (``schedulers[].simple.resources.cold_memory``).
COLD = 512 * MIB


def _with_pair(ws: Workspace, small: int, big: int) -> None:
    """Add ``//:pair``: one cc_library with two sources of different sizes."""
    for name, funcs in (("pair_a", small), ("pair_b", big)):
        body = "".join(
            f"unsigned {name}_{i}(unsigned x) {{ for (int k = 0; k < {i + 3}; k++) "
            f"x = x * 2654435761u + {i}u; return x; }}\n"
            for i in range(funcs)
        )
        (ws.root / "src" / f"{name}.c").write_text(body)
    with (ws.root / "BUILD").open("a") as build:
        build.write(
            '\ncc_library(\n    name = "pair",\n    srcs = ["src/pair_a.c", "src/pair_b.c"],\n'
            '    copts = ["-O2"],\n)\n'
        )


def _samples(db: Path) -> list[tuple[str, float, int]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT key, recorded_at, peak_rss_bytes FROM samples ORDER BY recorded_at"
        ).fetchall()
    return [(str(k), float(t), int(p)) for k, t, p in rows]


def _old_key(fine: str) -> str:
    """The coarser key without repository and output, ``bazel:{mnemonic}:{target}``,
    which the learner still reads as a fallback."""
    rest = fine.split("] ", 1)[1] if fine.startswith("[") else fine
    return rest.split(" -> ", 1)[0]


def _target_key(fine: str) -> str:
    return fine.split(" -> ", 1)[0]


def _spread(groups: dict[str, list[int]]) -> dict[str, object]:
    worst = max(groups.items(), key=lambda kv: max(kv[1]) / max(1, min(kv[1])))
    ratios = sorted(max(v) / max(1, min(v)) for v in groups.values())
    return {
        "keys": len(groups),
        "worst_key": worst[0],
        "worst_max_over_min": round(max(worst[1]) / max(1, min(worst[1])), 2),
        "median_max_over_min": round(ratios[len(ratios) // 2], 2),
    }


def _cold_starts(runs: list[tuple[str, float, int]], builds: list[float]) -> dict[str, list[int]]:
    """Per build, the runs no earlier build taught: under the old key, the new
    fine key alone, and the new key with its fallback to the target's key."""
    schemes = {
        "old": lambda k: [_old_key(k)],
        "new_fine_only": lambda k: [k],
        "new": lambda k: [k, _target_key(k)],
    }
    out: dict[str, list[int]] = {name: [] for name in schemes}
    for i, start in enumerate(builds):
        end = builds[i + 1] if i + 1 < len(builds) else float("inf")
        before = [k for k, t, _ in runs if t < start]
        now = [k for k, t, _ in runs if start <= t < end]
        for name, chain in schemes.items():
            known = {c for k in before for c in chain(k)}
            out[name].append(sum(1 for k in now if not set(chain(k)) & known))
    return out


def test_repositories_and_actions_of_one_target_keep_their_own_history(tmp_path: Path) -> None:
    require_bazel()
    first = generate_workspace(tmp_path / "first", modules=4, funcs=1, seed=5)
    second = generate_workspace(tmp_path / "second", modules=4, funcs=12, seed=6)
    _with_pair(first, small=2, big=400)
    _with_pair(second, small=3, big=200)
    copy = tmp_path / "copy"
    shutil.copytree(first.root, copy)
    root = tmp_path / "lre-root"
    config = tmp_path / "lre.json5"
    config.write_text(
        app_config_text(
            root,
            status_port=free_port(),
            max_inflight=4,
            extra_worker=', platform_properties: { OSFamily: { values: ["Linux"] } }',
        ).replace('memory_budget: "2GiB"', 'memory_budget: "4GiB"')
    )
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    up = run_lre("up", "--detach", "--config", str(config), "--port", str(free_port()),
                 cwd=first.root, env=env)  # fmt: skip
    assert up.returncode == 0, up.stdout + up.stderr
    builds: list[float] = []
    try:
        for repo in (second.root, copy):
            linked = run_lre("up", "--config", str(config), cwd=repo, env=env)
            assert linked.returncode == 0, linked.stdout + linked.stderr
        for repo in (first.root, second.root, copy):
            assert "--remote_header=x-lre-repository=" in (repo / "lre.bazelrc").read_text()
        with BazelSession(first.root, tmp_path / "bazel-first") as bazel:
            builds.append(time.time())
            bazel.build(["//:app", "//:pair"]).check()
            with BazelSession(copy, tmp_path / "bazel-copy") as other:
                copied = other.build(["//:app", "//:pair"]).check()
                # same actions from another repository header: all cache hits
                assert copied.count("remote") == 0, copied
                assert copied.count("remote cache hit") == copied.spawns, copied
            with BazelSession(second.root, tmp_path / "bazel-second") as other:
                builds.append(time.time())
                other.build(["//:app", "//:pair"]).check()
            for name in ("mod_00.c", "pair_b.c"):
                source = first.root / "src" / name
                source.write_text(source.read_text() + "\nint lre_edit_keys(void) { return 1; }\n")
            builds.append(time.time())
            bazel.build(["//:app", "//:pair"]).check()
    finally:
        down = run_lre("down", "--config", str(config), cwd=first.root, env=env)
    assert down.returncode == 0, down.stdout + down.stderr

    samples = _samples(root / "state" / "learned-reservations.sqlite3")
    runs = [s for s in samples if " -> " in s[0]]  # one fine-key sample per run
    repos = {k.split("]", 1)[0] + "]" for k, _, _ in runs}
    assert len(repos) == 2, repos  # first and second; the copy ran nothing
    pair_compiles = {k for k, _, _ in runs if "bazel:CppCompile://:pair ->" in k}
    assert len(pair_compiles) == 4, pair_compiles  # two sources x two repositories
    keys_by_build = [
        {k for k, t, _ in runs if start <= t < (builds[i + 1] if i + 1 < len(builds) else 1e18)}
        for i, start in enumerate(builds)
    ]
    first_repo_keys = keys_by_build[0]
    assert keys_by_build[2] <= first_repo_keys, keys_by_build[2] - first_repo_keys
    target_keys = {k for k, _, _ in samples if " -> " not in k}
    assert {_target_key(k) for k, _, _ in runs} <= target_keys

    report = os.environ.get("LRE_LEARNER_KEYS_REPORT")
    if report:
        by_old: dict[str, list[int]] = defaultdict(list)
        by_new: dict[str, list[int]] = defaultdict(list)
        for key, _, peak in runs:
            by_old[_old_key(key)].append(peak)
            by_new[key].append(peak)
        document = {
            "runs": len(runs),
            "old_key": _spread(by_old),
            "new_key": _spread(by_new),
            "cold_starts_per_build": _cold_starts(runs, builds),
            "pair_peaks_MiB": {
                k: [round(p / MIB, 1) for kk, _, p in runs if kk == k]
                for k in sorted(pair_compiles)
            },
            "spread_old_MiB": {
                k: [round(min(v) / MIB, 1), round(max(v) / MIB, 1)]
                for k, v in sorted(by_old.items())
            },
        }
        Path(report).write_text(json.dumps(document, indent=1))
