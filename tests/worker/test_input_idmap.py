"""Inputs of an action run as another user show as its own (``_idmap.py``).

Real actions under ``pidns`` as ``nobody`` (what ``action_user:
"unprivileged"`` picks as root), inputs hardlinked from a filesystem CAS:
chmod, write and hardlink an input as a build does, and look from outside
that the CAS's blob did not change. A writable path the user cannot reach
is refused at start-up naming it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lre.app import AppBuildError, Application
from lre.cas import FilesystemStore, read_bytes
from lre.config import resolve
from lre.config._loader import load_config_text
from lre.digest import Digest, digest_of
from lre.scheduler import Completed
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker._idmap import idmap_views
from lre.worker._view_policy import ViewPolicy
from lre.worker.containment._identity import ActionIdentity
from lre.worker.directories._workdir import WorkDirectory
from tests._support.actions import File
from tests._support.configs import app_config_text

from .conftest import make_lease, make_spec
from .test_action_identity import nobody
from .test_containment import backend

__all__ = ["nobody"]

_DATA = b"payload\n"


async def _run(
    tmp_path: Path, identity: ActionIdentity, script: str, outputs: tuple[str, ...]
) -> tuple[Completed, str, str]:
    """Run ``script`` as ``nobody`` over inputs ``data`` and ``bin/tool``
    linked from a filesystem CAS; (outcome, stdout, CAS file of ``data``)."""
    store = FilesystemStore(tmp_path / "cas", tmp_path / "cas-tmp", 1 << 30)
    await store.open()
    spec = make_spec(tmp_path)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(
            RunnerContext(
                spec,
                workdir,
                store,
                containment=backend("pidns"),
                identity=identity,
            )
        )
        try:
            lease = await make_lease(
                store,  # type: ignore[arg-type]
                ["/bin/sh", "-c", script],
                inputs={"data": _DATA, "bin": {"tool": File(b"#!/bin/sh\n", executable=True)}},
                output_paths=outputs,
            )
            outcome = await runner.run(lease)
        finally:
            runner.close()
    assert isinstance(outcome, Completed) and outcome.error is None, outcome
    stdout = await read_bytes(store, Digest.from_proto(outcome.result.stdout_digest, field=""))
    blob = await store.path_for_link(digest_of(_DATA), False)
    return outcome, stdout.decode(), blob


def _unchanged(blob: str) -> None:
    info = os.stat(blob)
    assert Path(blob).read_bytes() == _DATA
    assert (info.st_uid, info.st_mode & 0o777) == (os.geteuid(), 0o444)


async def test_an_input_chmodded_and_written_in_place_changes_only_the_actions_copy(
    tmp_path: Path, nobody: ActionIdentity
) -> None:
    script = (
        "chmod u+w data && echo more >> data && chmod 0700 bin/tool && "
        "stat -c '%u %a' data bin/tool && cat data"
    )
    outcome, out, blob = await _run(tmp_path, nobody, script, ("data",))
    assert out == f"{nobody.uid} 644\n{nobody.uid} 700\npayload\nmore\n", out
    [data] = outcome.result.output_files
    assert Digest.from_proto(data.digest, field="") == digest_of(b"payload\nmore\n")
    _unchanged(blob)


async def test_an_input_hardlinked_into_an_output_is_stored(
    tmp_path: Path, nobody: ActionIdentity
) -> None:
    script = "mkdir -p out && ln data out/linked && ln bin/tool out/tool && echo linked"
    outcome, out, blob = await _run(tmp_path, nobody, script, ("out",))
    assert out == "linked\n", out
    [tree] = outcome.result.output_directories
    assert tree.path == "out"
    _unchanged(blob)


def test_a_writable_path_the_actions_user_cannot_reach_is_refused_at_start_up(
    tmp_path: Path, open_dir: Path, nobody: ActionIdentity
) -> None:
    closed = open_dir / "closed"
    inside = closed / "ccache"
    inside.mkdir(parents=True)
    os.chmod(closed, 0o700)
    os.chmod(inside, 0o777)
    (tmp_path / "lre").mkdir()
    text = app_config_text(
        tmp_path / "lre",
        extra_worker=(
            ', containment: "pidns", action_user: "unprivileged", '
            f'sandbox_writable_paths: ["{inside}"]'
        ),
    )
    with pytest.raises(AppBuildError) as raised:
        Application(resolve(load_config_text(text, source="t.json5")))
    message = str(raised.value)
    assert "workers[0].local.sandbox_writable_paths" in message, message
    assert f"{str(inside)!r} lies below {str(closed)!r}" in message, message


def test_where_the_mapping_cannot_be_tried_the_worker_warns_and_keeps_its_inputs_lres(
    tmp_path: Path, nobody: ActionIdentity, caplog: pytest.LogCaptureFixture
) -> None:
    """A refused probe (here: no scratch directory to try it in) leaves the
    views unmapped, says so naming the worker, and leaks no descriptor."""
    policy = ViewPolicy([], [], xattrs="trusted", owner=nobody.owner)
    before = len(os.listdir("/proc/self/fd"))
    assert idmap_views(policy, "w9", tmp_path / "missing") is None
    assert policy.idmap is None
    assert len(os.listdir("/proc/self/fd")) == before
    [warning] = [r.getMessage() for r in caplog.records if "idmapped" in r.getMessage()]
    assert warning.startswith("worker w9: inputs stay lre's"), warning
