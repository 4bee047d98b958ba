"""A view's overlay layers on a tmpfs of the action's own, dropped whole.

What an action writes into its input root lands in its overlay's upper
layer, which lies on a fresh tmpfs made for its directory
(``_view.make_layers``, ``ActionLayers``), never on lre's disk; once its
outputs are stored and its view closed, recycling closes every descriptor
of that tmpfs (lre's, and the view helper's under ``userns``) and the whole
filesystem goes, nothing walked.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import trio

from lre.cas import MemoryStore
from lre.scheduler import Completed
from lre.worker import Containment
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker._view_policy import ViewPolicy
from lre.worker.directories import ActionDirectory, ActionLayers
from lre.worker.directories._workdir import WorkDirectory

from .conftest import make_lease, make_spec
from .test_containment import backend


@pytest.fixture(params=["pidns", "userns"])
def viewing(request: pytest.FixtureRequest) -> Containment:
    containment = backend(request.param)
    assert containment.can_view, f"{request.param} gives actions no view here"
    return containment


def _leading_to(relative: str, pids: list[int]) -> list[str]:
    """The descriptors of processes ``pids`` through which ``relative``
    exists (device numbers of a tmpfs freed are reused: what it holds
    tells one from another)."""
    found = []
    for pid in pids:
        for name in os.listdir(f"/proc/{pid}/fd"):
            if os.path.lexists(f"/proc/{pid}/fd/{name}/{relative}"):
                found.append(f"/proc/{pid}/fd/{name}")
    return found


def _holders(containment: Containment) -> list[int]:
    """lre, and the view helper where one builds the views."""
    helper = getattr(containment, "_views", None)
    return [os.getpid(), *(() if helper is None else (helper.pid,))]


async def test_an_actions_tmpfs_is_never_on_disk_and_dropped_whole_after_it(
    tmp_path: Path, store: MemoryStore, viewing: Containment
) -> None:
    spec = make_spec(tmp_path, max_inflight_tasks=1)
    script = "echo o > out; echo s > stray; mkdir -p d/e; echo x > d/e/x; sleep 1"
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store, containment=viewing))
        directories = runner.parts.directories
        async with trio.open_nursery() as nursery:
            await nursery.start(directories.run)
            with trio.fail_after(10):
                while not directories.ready:  # noqa: ASYNC110 (thread work)
                    await trio.sleep(0.01)
            taken = directories._stock[-1].layers  # ``take`` pops the last
            assert taken is not None
            device = os.stat(taken.upper).st_dev
            assert device != os.stat(workdir.path).st_dev
            taken_files = "upper/stray"  # what only the action's tmpfs holds
            lease = await make_lease(store, ["/bin/sh", "-c", script], output_paths=("out",))
            outcomes: list[object] = []

            async def run() -> None:
                outcomes.append(await runner.run(lease))

            nursery.start_soon(run)
            with trio.fail_after(10):
                while not (taken.upper / "d/e/x").exists():  # noqa: ASYNC110
                    await trio.sleep(0.01)
            # Written, on the tmpfs, and nowhere under lre's directories on disk.
            assert [p for p in workdir.path.rglob("*") if p.name in ("stray", "x")] == []
            with trio.fail_after(15):
                while not outcomes or not directories.recycled or not directories.idle:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            (outcome,) = outcomes
            assert isinstance(outcome, Completed) and outcome.error is None, outcome
            assert [f.path for f in outcome.result.output_files] == ["out"]
            # (The view helper closes its descriptor when it reads lre's word.)
            # (The view helper closes its descriptor when it reads lre's word.)
            with trio.fail_after(5):
                while _leading_to(taken_files, _holders(viewing)):  # noqa: ASYNC110
                    await trio.sleep(0.01)
            # The directory came back with a fresh, empty tmpfs.
            fresh = directories._stock[-1].layers
            assert fresh is not None and os.listdir(fresh.upper) == []
            nursery.cancel_scope.cancel()


def test_a_view_names_its_layers_through_the_builders_descriptor(tmp_path: Path) -> None:
    """The overlay's upper and work directories are those of the tmpfs the
    view builder holds (which it also shows at /tmp and /dev/shm); a
    directory with no tmpfs gets no view."""
    policy = ViewPolicy((), (), xattrs="trusted")
    directory = ActionDirectory.at(tmp_path / "a1")
    with pytest.raises(OSError, match="no tmpfs"):
        policy.view_for({}, directory)
    view = policy.view_for({}, dataclasses.replace(directory, layers=ActionLayers(7, 9)))
    assert (view.upper, view.work, view.layers) == (
        "/proc/self/fd/9/upper",
        "/proc/self/fd/9/work",
        9,
    )
