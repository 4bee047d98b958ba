"""Regenerate the committed Python code for lre's .proto files.

Run ``python -m lre.proto.regenerate`` from the repository root after editing a
.proto file; ``tests/proto/test_generated_current.py`` fails until the
committed code matches what this produces. Needs grpcio-tools and
googleapis-common-protos (both in the ``test`` extra).

protoc stamps each module with a check that refuses any protobuf (``_pb2``)
or grpcio (``_pb2_grpc``) older than the protoc that wrote it, which would tie
lre to the newest of both. The check is taken out (``relax_version_checks``);
the oldest versions pyproject.toml allows are the ones CI imports and runs
the modules with (``tests/proto/test_oldest_versions.py``).

On failure (protoc reports an error) the exit status is non-zero and the
generated files that already existed are left as they were.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

#: .proto sources, relative to the repository root (the protoc include root).
PROTO_FILES = (
    "lre/proto/build/bazel/semver/semver.proto",
    "lre/proto/build/bazel/remote/execution/v2/remote_execution.proto",
    "lre/proto/google/bytestream/bytestream.proto",
    "lre/proto/lre/v1/lre.proto",
)

#: Suffixes of the files protoc writes for each source.
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")

_PROTOBUF_IMPORT = "from google.protobuf import runtime_version as _runtime_version\n"
_PROTOBUF_CHECK = re.compile(r"_runtime_version\.ValidateProtobufRuntimeVersion\(\n.*?\n\)\n", re.S)
_GRPC_CHECK = re.compile(
    r"GRPC_GENERATED_VERSION = .*?\nif _version_not_supported:\n.*?\n    \)\n", re.S
)
_NOTE = "# lre.proto.regenerate took out protoc's version check (see its docstring).\n"


def relax_version_checks(name: str, text: str) -> str:
    """``text`` of generated file ``name`` without protoc's minimum-version check.

    Raises RuntimeError when a ``_pb2.py``/``_pb2_grpc.py`` file does not
    hold the check in the form this knows (a new protoc wrote something else:
    look at the file and update the patterns).
    """
    if name.endswith("_pb2.py"):
        if _PROTOBUF_IMPORT not in text or not _PROTOBUF_CHECK.search(text):
            raise RuntimeError(f"{name}: protobuf runtime check not found")
        return _PROTOBUF_CHECK.sub(_NOTE, text.replace(_PROTOBUF_IMPORT, ""), count=1)
    if name.endswith("_pb2_grpc.py"):
        if not _GRPC_CHECK.search(text):
            raise RuntimeError(f"{name}: grpcio version check not found")
        return _GRPC_CHECK.sub(_NOTE, text, count=1)
    return text


def _googleapis_include(into: Path) -> None:
    """Lay out the googleapis .proto files our sources import.

    googleapis-common-protos ships them inside the ``google`` package, but the
    long-running operations file under a different name than the one it
    registers in the descriptor pool; copy it under the registered name.
    """
    import google.api
    import google.longrunning
    import google.rpc

    api_dir = Path(next(iter(google.api.__path__)))
    rpc_dir = Path(next(iter(google.rpc.__path__)))
    lro_dir = Path(next(iter(google.longrunning.__path__)))
    (into / "google/api").mkdir(parents=True)
    (into / "google/rpc").mkdir(parents=True)
    (into / "google/longrunning").mkdir(parents=True)
    for proto in api_dir.glob("*.proto"):
        shutil.copy(proto, into / "google/api" / proto.name)
    shutil.copy(rpc_dir / "status.proto", into / "google/rpc/status.proto")
    shutil.copy(lro_dir / "operations_proto.proto", into / "google/longrunning/operations.proto")


def generate(root: Path, out: Path) -> None:
    """Compile every file in PROTO_FILES found under ``root`` into ``out``.

    Raises RuntimeError naming protoc's exit status when compilation fails.
    """
    import grpc_tools
    from grpc_tools import protoc

    builtin = Path(next(iter(grpc_tools.__path__))) / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        include = Path(tmp)
        _googleapis_include(include)
        args = [
            "protoc",
            f"-I{root}",
            f"-I{include}",
            f"-I{builtin}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            *PROTO_FILES,
        ]
        status = protoc.main(args)
    if status != 0:
        raise RuntimeError(f"protoc exited with status {status}")
    for proto in PROTO_FILES:
        for suffix in GENERATED_SUFFIXES:
            path = out / (proto.removesuffix(".proto") + suffix)
            path.write_text(relax_version_checks(path.name, path.read_text("utf-8")), "utf-8")


def main() -> int:
    root = Path.cwd()
    if not (root / PROTO_FILES[0]).exists():
        print("run from the repository root", file=sys.stderr)
        return 2
    generate(root, root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
