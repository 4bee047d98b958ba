"""Regenerate the committed Python code for lre's .proto files.

Run ``python -m lre.proto.regenerate`` from the repository root after editing a
.proto file; ``tests/proto/test_generated_current.py`` fails until the
committed code matches what this produces. Needs grpcio-tools and
googleapis-common-protos (both in the ``test`` extra).

On failure (protoc reports an error) the exit status is non-zero and the
generated files that already existed are left as they were.
"""

from __future__ import annotations

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


def main() -> int:
    root = Path.cwd()
    if not (root / PROTO_FILES[0]).exists():
        print("run from the repository root", file=sys.stderr)
        return 2
    generate(root, root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
