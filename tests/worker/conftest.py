"""Fixtures of the worker tests: a real store, a worker spec, leases of actions
built with ``tests._support.actions``."""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from lre.cas import BlobStore, MemoryStore
from lre.config._worker_models import LocalWorkerSpec
from lre.digest import Digest, DigestFunction
from lre.scheduler._lease import Lease
from lre.scheduler._model import ActionKey, RequestInfo, Reservation
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker.directories._workdir import WorkDirectory
from tests._support.actions import TreeSpec, build_action, put_action

_ids = itertools.count(1)


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
    store: BlobStore,
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
    built = build_action(
        arguments,
        inputs=inputs,
        input_root=input_root,
        env=env,
        output_paths=output_paths,
        output_files=output_files,
        output_directories=output_directories,
        working_directory=working_directory,
        do_not_cache=do_not_cache,
    )
    await put_action(store, built)
    n = next(_ids)
    return Lease(
        lease_id=f"lease-{n}",
        operation_name=f"operations/{n}",
        worker_name="w1",
        action_key=ActionKey("", DigestFunction.SHA256, built.digest),
        action=built.action,
        command=built.command,
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
def env(tmp_path: Path, store: MemoryStore) -> Iterator[Env]:
    spec = make_spec(tmp_path)
    workdir = WorkDirectory.open(spec.work_directory, spec.name)
    runner = ActionRunner(RunnerContext(spec, workdir, store))
    try:
        yield Env(store, workdir, spec, runner)
    finally:
        workdir.close()


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A new directory every user may traverse on the way to (pytest's
    ``tmp_path`` lies below 0700 directories), removed after the test."""
    path = Path(tempfile.mkdtemp(prefix="lre-open-", dir="/var/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
