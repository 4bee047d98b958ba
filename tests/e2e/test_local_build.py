"""The e2e workspace and Bazel harness, checked without lre: a local Bazel build.

The lre end-to-end tests reuse both; if the workspace or the harness is wrong,
this test says so without a server in the way.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests._support.processes import require_tool
from tests.e2e._bazel import (
    BazelSession,
    parse_process_summary,
    platform_properties,
    read_execution_log,
)
from tests.e2e._workspace import generate_workspace


@pytest.mark.parametrize(
    ("output", "total", "kinds"),
    [
        ("INFO: 206 processes: 84 internal, 122 remote.\n", 206, {"internal": 84, "remote": 122}),
        (
            "x\nINFO: 206 processes: 122 remote cache hit, 84 internal.\nINFO: Build completed",
            206,
            {"remote cache hit": 122, "internal": 84},
        ),
        ("INFO: 1 process: 1 internal.\n", 1, {"internal": 1}),
        (
            "INFO: 9 processes: 2 internal, 7 linux-sandbox.\n"
            "INFO: 3 processes: 1 internal, 2 remote.\n",
            3,
            {"internal": 1, "remote": 2},
        ),
        ("INFO: 0 processes.\n", 0, {}),
    ],
)
def test_summary_line_is_parsed(output: str, total: int, kinds: dict[str, int]) -> None:
    summary = parse_process_summary(output)
    assert summary is not None
    assert summary.total == total
    assert summary.kinds == kinds


def test_summary_parser_rejects_what_it_does_not_understand() -> None:
    assert parse_process_summary("INFO: Build completed successfully") is None
    with pytest.raises(ValueError, match="do not add up"):
        parse_process_summary("INFO: 5 processes: 1 internal, 2 remote.\n")


def test_python_model_matches_the_compiled_c(tmp_path: Path) -> None:
    """The checksum model agrees with gcc's build of the same sources (no Bazel)."""
    gcc = require_tool("gcc")
    ws = generate_workspace(tmp_path / "ws", modules=4, funcs=2, seed=7)
    sources = [str(p) for p in sorted((ws.root / "src").glob("*.c"))]
    binary = tmp_path / "app"
    subprocess.run(
        [gcc, "-O1", f"-I{ws.root}", "-o", str(binary), *sources], check=True, timeout=120
    )
    for n in (0, 1, 37):
        out = subprocess.run([binary, str(n)], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == ws.expected_checksum(n)
    assert ws.expected_checksum(1) != ws.expected_checksum(2)


def test_generation_is_deterministic(tmp_path: Path) -> None:
    a = generate_workspace(tmp_path / "a", modules=3, funcs=2, seed=1)
    b = generate_workspace(tmp_path / "b", modules=3, funcs=2, seed=1)
    for path in sorted(p for p in a.root.rglob("*") if p.is_file()):
        assert (b.root / path.relative_to(a.root)).read_bytes() == path.read_bytes()


@pytest.mark.slow
@pytest.mark.bazel
def test_workspace_builds_locally_with_bazel(tmp_path: Path) -> None:
    """Also shows that lre's platform and a per-target exec_properties reach each spawn."""
    heavy = {"memory_kb": "1048576"}
    ws = generate_workspace(tmp_path / "ws", first_module_exec_properties=heavy)
    assert len(ws.modules) >= 20
    log = tmp_path / "exec.json"
    flags = [
        "--extra_execution_platforms=//toolchains/bazel:lre",
        f"--execution_log_json_file={log}",
    ]
    with BazelSession(ws.root, tmp_path / "bazel-root") as bazel:
        summary = bazel.build([ws.target], flags).check()
        assert summary.spawns == ws.spawn_count, summary
        assert summary.local == summary.spawns, summary
        out = subprocess.run(
            [ws.binary, "100"], capture_output=True, text=True, check=True, timeout=60
        )
        assert out.stdout.strip() == ws.expected_checksum(100)
        spawns = read_execution_log(log)
        assert len(spawns) == ws.spawn_count
        base = {"OSFamily": "Linux", "cpu_count": "1"}
        for spawn in spawns:
            props = platform_properties(spawn)
            if "src/mod_00.c" in " ".join(spawn.get("commandArgs", [])):
                assert props == base | heavy, spawn
            else:
                assert props == base, spawn
        # A no-op rebuild runs nothing.
        again = bazel.build([ws.target], flags).check()
        assert again.spawns == 0, again
        assert len(bazel.server_pids()) == 1  # so the check after shutdown means something
    assert bazel.server_pids() == []
