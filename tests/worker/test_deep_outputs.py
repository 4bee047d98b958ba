"""Outputs deeper than PATH_MAX (4096 bytes): stored, or refused as the request's fault.

Each name is short; only the whole path is longer than any call takes. An
output directory holding such a tree is read and stored through directory
descriptors (a big file is copied through one, not moved by its path); an
output file declared that deep cannot even have its parents made, and the
action fails with INVALID_ARGUMENT naming it (final: not an infrastructure
failure, so neither retried nor pausing the worker).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lre.cas import FilesystemStore, read_bytes
from lre.digest import Digest
from lre.errors import InvalidArgument
from lre.proto import re_pb2
from lre.scheduler import Completed
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker.directories._workdir import WorkDirectory

from .conftest import make_lease, make_spec
from .test_containment import backend

#: 30 levels of 200-byte names: 6,030 bytes below the output directory.
_NAME = "d" * 200
_LEVELS = 30
_DEEP = "/".join([_NAME] * _LEVELS)
#: Makes the tree one name at a time (a shell's ``cd`` refuses to go that
#: deep: it keeps the whole path), writes a big and a small file at the
#: bottom and prints the big one's SHA-256.
_MAKE = f"""
import hashlib, os
os.mkdir("out"); os.chdir("out")
for _ in range({_LEVELS}):
    os.mkdir("{_NAME}"); os.chdir("{_NAME}")
data = os.urandom(3000000)
open("big", "wb").write(data)
open("small", "w").write("small\\n")
print(hashlib.sha256(data).hexdigest())
"""


def _runner(
    spec: object, workdir: WorkDirectory, store: FilesystemStore, name: str
) -> ActionRunner:
    handle = store
    return ActionRunner(RunnerContext(spec, workdir, handle, containment=backend(name)))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["pidns", "userns", "portable"])
async def test_an_output_directory_deeper_than_path_max_is_stored(
    tmp_path: Path, name: str
) -> None:
    store = FilesystemStore(tmp_path / "cas", tmp_path / "cas-tmp", 1 << 30)
    await store.open()
    spec = make_spec(tmp_path)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        lease = await make_lease(
            store,  # type: ignore[arg-type]
            ["python3", "-c", _MAKE],
            output_directories=("out",),
        )
        outcome = await _runner(spec, workdir, store, name).run(lease)
    assert isinstance(outcome, Completed) and outcome.error is None, outcome
    stdout = await read_bytes(store, Digest.from_proto(outcome.result.stdout_digest, field=""))
    assert outcome.result.exit_code == 0, outcome.result
    expected = stdout.decode().split()[0]
    (directory,) = outcome.result.output_directories
    tree = re_pb2.Tree.FromString(
        await read_bytes(store, Digest.from_proto(directory.tree_digest, field=""))
    )
    # One child per level; the deepest holds the two files.
    assert len(tree.children) == _LEVELS
    deepest = next(child for child in tree.children if child.files)
    files = {f.name: f for f in deepest.files}
    assert set(files) == {"big", "small"}
    assert files["big"].digest.hash == expected
    stored = await read_bytes(store, Digest.from_proto(files["big"].digest, field=""))
    assert hashlib.sha256(stored).hexdigest() == expected and len(stored) == 3000000
    small = await read_bytes(store, Digest.from_proto(files["small"].digest, field=""))
    assert small == b"small\n"


@pytest.mark.parametrize("name", ["pidns", "userns", "portable"])
async def test_an_output_file_deeper_than_path_max_is_an_invalid_argument(
    tmp_path: Path, name: str
) -> None:
    store = FilesystemStore(tmp_path / "cas", tmp_path / "cas-tmp", 1 << 30)
    await store.open()
    spec = make_spec(tmp_path)
    declared = f"out/{_DEEP}/big"
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        lease = await make_lease(
            store,  # type: ignore[arg-type]
            ["python3", "-c", _MAKE],
            output_files=(declared,),
        )
        outcome = await _runner(spec, workdir, store, name).run(lease)
    # Completed with an error is final: no retry, the worker not paused
    # (an InfrastructureFailure would be both).
    assert isinstance(outcome, Completed), outcome
    assert isinstance(outcome.error, InvalidArgument), outcome
    assert "output path" in outcome.message and "PATH_MAX" in outcome.message
    assert declared[:100] in outcome.message and declared[-100:] in outcome.message
