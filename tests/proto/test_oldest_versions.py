"""The generated modules run with the oldest protobuf, grpcio and
googleapis-common-protos that pyproject.toml allows.

A separate venv gets exactly those versions from PyPI (with pip) and runs
``oldest_versions_check.py`` there: it imports every generated module
through ``lre.proto`` and makes one real gRPC call. The venv is cached in the
temp directory under a name made of the versions and the Python version, so
only the first run after a change of minimum pays for the install.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Packages whose minimum decides whether the generated code runs.
PINNED = ("protobuf", "grpcio", "googleapis-common-protos")


def minimums() -> dict[str, str]:
    """``{package: lowest version}`` from ``>=`` bounds in pyproject.toml."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        dependencies = tomllib.load(f)["project"]["dependencies"]
    found: dict[str, str] = {}
    for dependency in dependencies:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(.*)", dependency)
        assert match is not None, dependency
        bound = re.search(r">=\s*([0-9][0-9A-Za-z.]*)", match[2])
        if match[1] in PINNED:
            assert bound is not None, f"pyproject.toml: {dependency!r} has no >= minimum"
            found[match[1]] = bound[1]
    assert sorted(found) == sorted(PINNED), f"pyproject.toml lacks one of {PINNED}"
    return found


def _venv(versions: dict[str, str]) -> Path:
    """A venv holding exactly ``versions``, built once per key and reused.

    A lock file serialises test runs building the same venv; a venv whose
    build did not finish (no ``complete`` marker) is removed and rebuilt.
    """
    requirements = [f"{name}=={version}" for name, version in sorted(versions.items())]
    key = hashlib.sha256(" ".join([sys.version, *requirements]).encode()).hexdigest()[:16]
    venv = Path(tempfile.gettempdir()) / f"lre-proto-oldest-{key}"
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / "complete").exists():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        install = subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--only-binary=:all:",
                *requirements,
            ],
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        assert install.returncode == 0, f"pip install {requirements}:\n{install.stderr}"
        (venv / "complete").write_text("\n".join(requirements) + "\n")
    return venv


@pytest.mark.slow
def test_generated_modules_run_with_the_oldest_allowed_versions() -> None:
    wanted = minimums()
    venv = _venv(wanted)
    python = str(venv / "bin" / "python")
    freeze = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    installed = dict(line.split("==", 1) for line in freeze.stdout.split())
    installed = {name.lower().replace("_", "-"): v for name, v in installed.items()}
    assert {name: installed.get(name) for name in wanted} == wanted
    proc = subprocess.run(
        [python, "-W", "error", str(Path(__file__).with_name("oldest_versions_check.py"))],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = f"protobuf {wanted['protobuf']} grpcio {wanted['grpcio']}: ok"
    assert proc.stdout.strip() == expected


def test_regeneration_fails_when_protoc_writes_an_unknown_check() -> None:
    from lre.proto.regenerate import relax_version_checks

    with pytest.raises(RuntimeError, match=r"x_pb2\.py: protobuf runtime check not found"):
        relax_version_checks("x_pb2.py", "import os\n")
    with pytest.raises(RuntimeError, match=r"x_pb2_grpc\.py: grpcio version check not found"):
        relax_version_checks("x_pb2_grpc.py", "import grpc\n")
    assert relax_version_checks("x_pb2.pyi", "anything\n") == "anything\n"
