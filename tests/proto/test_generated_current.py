"""The committed generated code is exactly what ``python -m lre.proto.regenerate`` makes.

Regeneration runs in a subprocess (protoc is driven through grpc_tools in
process there) into a temp dir; every generated file is compared byte for byte.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lre.proto.regenerate import GENERATED_SUFFIXES, PROTO_FILES

ROOT = Path(__file__).resolve().parent.parent.parent


def _generated_names() -> list[str]:
    return [
        proto.removesuffix(".proto") + suffix
        for proto in PROTO_FILES
        for suffix in GENERATED_SUFFIXES
    ]


def test_committed_generated_code_is_current(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, pathlib; from lre.proto.regenerate import generate; "
            "generate(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))",
            str(ROOT),
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    stale = [
        name
        for name in _generated_names()
        if (out / name).read_bytes() != (ROOT / name).read_bytes()
    ]
    assert not stale, f"run `python -m lre.proto.regenerate`; out of date: {stale}"


def test_every_generated_file_is_committed() -> None:
    proc = subprocess.run(
        ["git", "ls-files", "--error-unmatch", *_generated_names()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def test_a_changed_proto_makes_the_check_fail(tmp_path: Path) -> None:
    """Regenerating from an edited copy must give different bytes (the check can fail)."""
    root = tmp_path / "root"
    for proto in PROTO_FILES:
        (root / proto).parent.mkdir(parents=True, exist_ok=True)
        (root / proto).write_bytes((ROOT / proto).read_bytes())
    semver = next(p for p in PROTO_FILES if p.endswith("semver.proto"))
    text = (root / semver).read_text()
    assert "string prerelease = 4;" in text
    (root / semver).write_text(text.replace("string prerelease = 4;", "string prerelease = 5;"))
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, pathlib; from lre.proto.regenerate import generate; "
            "generate(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))",
            str(root),
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    name = semver.removesuffix(".proto") + "_pb2.py"
    assert (out / name).read_bytes() != (ROOT / name).read_bytes()
