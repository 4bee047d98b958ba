"""Helpers for worker tests: build input trees in a real store, make leases."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from lre.cas import MemoryStore, write_bytes, write_message
from lre.config._models import LocalWorkerSpec
from lre.digest import Digest, DigestFunction
from lre.proto import re_pb2
from lre.scheduler._lease import Lease
from lre.scheduler._model import ActionKey, RequestInfo, Reservation
from lre.worker import ActionRunner, WorkDirectory

#: A tree spec: name -> bytes (file), ("x", bytes) (executable file),
#: ("link", target) (symlink) or a nested dict (directory).
TreeSpec = Mapping[str, object]

_ids = itertools.count(1)


async def put_tree(store: MemoryStore, spec: TreeSpec) -> Digest:
    """Upload a tree described by ``spec``; returns the root Directory digest."""
    directory = re_pb2.Directory()
    for name in sorted(spec):
        value = spec[name]
        if isinstance(value, bytes):
            digest = await write_bytes(store, value)
            directory.files.add(name=name, digest=digest.to_proto())
        elif isinstance(value, tuple) and value[0] == "x":
            digest = await write_bytes(store, value[1])
            directory.files.add(name=name, digest=digest.to_proto(), is_executable=True)
        elif isinstance(value, tuple) and value[0] == "link":
            directory.symlinks.add(name=name, target=value[1])
        elif isinstance(value, Mapping):
            child = await put_tree(store, value)
            directory.directories.add(name=name, digest=child.to_proto())
        else:
            raise TypeError(value)
    return await write_message(store, directory)


@dataclass
class Env:
    store: MemoryStore
    workdir: WorkDirectory
    spec: LocalWorkerSpec
    runner: ActionRunner


def make_spec(tmp_path: Path, **overrides: object) -> LocalWorkerSpec:
    values: dict[str, object] = {
        "name": "w1",
        "scheduler": "main",
        "cas_store": "CAS",
        "work_directory": str(tmp_path / "work"),
        "kill_grace_s": 0.5,
    }
    values.update(overrides)
    return LocalWorkerSpec(**values)  # type: ignore[arg-type]


async def make_lease(
    store: MemoryStore,
    arguments: list[str],
    *,
    inputs: TreeSpec | None = None,
    input_root: Digest | None = None,
    env: Mapping[str, str] | None = None,
    output_paths: tuple[str, ...] = (),
    output_files: tuple[str, ...] = (),
    output_directories: tuple[str, ...] = (),
    working_directory: str = "",
    timeout_s: float = 30.0,
    millicpus: int = 1000,
    platform: Mapping[str, str] | None = None,
    do_not_cache: bool = False,
    inline: bool = False,
) -> Lease:
    if input_root is None:
        input_root = await put_tree(store, inputs or {})
    command = re_pb2.Command(
        arguments=arguments,
        output_paths=output_paths,
        output_files=output_files,
        output_directories=output_directories,
        working_directory=working_directory,
    )
    for name, value in sorted((env or {}).items()):
        command.environment_variables.add(name=name, value=value)
    command_digest = await write_message(store, command)
    action = re_pb2.Action(
        command_digest=command_digest.to_proto(),
        input_root_digest=input_root.to_proto(),
        do_not_cache=do_not_cache,
    )
    action_digest = await write_message(store, action)
    n = next(_ids)
    return Lease(
        lease_id=f"lease-{n}",
        operation_name=f"operations/{n}",
        worker_name="w1",
        action_key=ActionKey("", DigestFunction.SHA256, action_digest),
        action=action,
        command=command,
        platform=dict(platform or {}),
        reservation=Reservation(millicpus=millicpus, memory_bytes=256 << 20),
        exclusive=False,
        attempt=1,
        ladder_step=0,
        timeout_s=timeout_s,
        queued_at=time.time(),
        request_info=RequestInfo(),
        kind_key="test",
        do_not_cache=do_not_cache,
        skip_cache_lookup=False,
        inline_stdout=inline,
        inline_stderr=inline,
    )


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(1 << 30)


@pytest.fixture
def env(tmp_path: Path, store: MemoryStore) -> Env:
    spec = make_spec(tmp_path)
    workdir = WorkDirectory.open(spec.work_directory, spec.name)
    runner = ActionRunner(spec, workdir, store)
    try:
        yield Env(store, workdir, spec, runner)  # type: ignore[misc]
    finally:
        workdir.close()
