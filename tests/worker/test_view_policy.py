"""Writable host paths and kept directories of actions' views (pidns and userns)."""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from lre.cas import MemoryStore, read_bytes
from lre.digest import Digest
from lre.errors import InvalidArgument
from lre.scheduler import Completed
from lre.worker import Containment
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker.directories._workdir import WorkDirectory

from .conftest import make_lease, make_spec
from .test_containment import backend


@pytest.fixture(params=["pidns", "userns"])
def viewing(request: pytest.FixtureRequest) -> Containment:
    containment = backend(request.param)
    assert containment.can_view, f"{request.param} gives actions no view here"
    return containment


@pytest.fixture
def shown() -> Iterator[Path]:
    """A fresh directory outside /tmp, which the view hides: what an action
    finds here is the host's (removed afterwards)."""
    path = Path(tempfile.mkdtemp(prefix="lre-view-test-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def _stdout(store: MemoryStore, outcome: object) -> bytes:
    assert isinstance(outcome, Completed) and outcome.error is None, outcome
    return await read_bytes(store, Digest.from_proto(outcome.result.stdout_digest, field=""))


async def test_only_the_writable_paths_of_the_host_are_writable(
    tmp_path: Path, store: MemoryStore, viewing: Containment, shown: Path
) -> None:
    cache = shown / "cache"
    allowed = shown / "allowed"
    extra = allowed / "extra"
    other = shown / "other"
    for path in (cache, extra, other):
        path.mkdir(parents=True)
    spec = make_spec(tmp_path, sandbox_writable_paths=(str(cache), str(allowed)))
    # The other directory is there in the view (seen), only not writable.
    script = (
        f"echo c > {cache}/c; echo e > {extra}/e; test -d {other} && echo seen; "
        f"echo o > {other}/o 2>/dev/null || echo refused"
    )
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store, containment=viewing))
        lease = await make_lease(
            store, ["/bin/sh", "-c", script], platform={"sandbox-writable-path": str(extra)}
        )
        outcome = await runner.run(lease)
    assert await _stdout(store, outcome) == b"seen\nrefused\n"
    assert (cache / "c").read_text() == "c\n"
    assert (extra / "e").read_text() == "e\n"
    assert not (other / "o").exists()


async def _refusal_of_writable_path(
    tmp_path: Path, store: MemoryStore, viewing: Containment, path: str | None
) -> tuple[str, str]:
    """Run an action asking ``path`` writable (None: lre's work directory);
    the refusal's message and the path asked."""
    spec = make_spec(tmp_path)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        asked = str(workdir.path) if path is None else path
        runner = ActionRunner(RunnerContext(spec, workdir, store, containment=viewing))
        lease = await make_lease(store, ["/bin/true"], platform={"sandbox-writable-path": asked})
        outcome = await runner.run(lease)
    assert isinstance(outcome, Completed)
    assert isinstance(outcome.error, InvalidArgument)
    return outcome.message, asked


async def test_a_writable_path_inside_lres_directories_is_refused(
    tmp_path: Path, store: MemoryStore, viewing: Containment
) -> None:
    message, asked = await _refusal_of_writable_path(tmp_path, store, viewing, None)
    assert "sandbox-writable-path" in message and asked in message


async def test_a_relative_writable_path_is_refused(
    tmp_path: Path, store: MemoryStore, viewing: Containment
) -> None:
    message, _ = await _refusal_of_writable_path(tmp_path, store, viewing, "cache/here")
    assert "'cache/here' is not an absolute path" in message


async def test_sandbox_debug_keeps_a_failed_actions_directory(
    tmp_path: Path, store: MemoryStore, viewing: Containment
) -> None:
    spec = make_spec(tmp_path)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store, containment=viewing))
        failing = await make_lease(
            store,
            ["/bin/sh", "-c", "echo partial > out.txt; exit 3"],
            inputs={"in.txt": b"input\n"},
            platform={"sandbox-debug": "1"},
        )
        outcome = await runner.run(failing)
        assert isinstance(outcome, Completed) and outcome.result.exit_code == 3
        kept = [p for p in workdir.path.glob("a*") if (p / "view" / "upper" / "out.txt").exists()]
        assert len(kept) == 1, list(workdir.path.iterdir())
        assert (kept[0] / "root" / "in.txt").read_bytes() == b"input\n"
        assert (kept[0] / "view" / "upper" / "out.txt").read_text() == "partial\n"
        # A successful action's directory is not kept.
        passing = await make_lease(
            store, ["/bin/sh", "-c", "echo fine > ok.txt"], platform={"sandbox-debug": "1"}
        )
        await runner.run(passing)
        assert not list(workdir.path.glob("a*/view/upper/ok.txt"))


async def test_the_debug_hint_shows_a_kept_directory_as_its_action_saw_it(
    tmp_path: Path,
    store: MemoryStore,
    viewing: Containment,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Only an overlay mounted with the action's options (userxattr under
    # userns) shows a directory that was removed and made again as opaque.
    spec = make_spec(tmp_path)
    script = "rm -rf in/sub && mkdir in/sub && echo new > in/sub/new; exit 3"
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store, containment=viewing))
        lease = await make_lease(
            store,
            ["/bin/sh", "-c", script],
            inputs={"in/f": b"f", "in/sub/old": b"old"},
            platform={"sandbox-debug": "1"},
        )
        with caplog.at_level(logging.WARNING, logger="lre.worker._view_policy"):
            outcome = await runner.run(lease)
        assert isinstance(outcome, Completed) and outcome.result.exit_code == 3
        (message,) = [r.getMessage() for r in caplog.records if "for debugging" in r.message]
        hint = message.partition("to see its view again: ")[2]
        assert hint, message
        shown = await trio.run_process(
            ["/bin/sh", "-c", hint],
            stdin=b"ls -A in in/sub\n",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert (shown.returncode, shown.stdout) == (0, b"in:\nf\nsub\n\nin/sub:\nnew\n"), shown.stderr


async def test_a_hidden_file_shows_nothing(
    tmp_path: Path, store: MemoryStore, viewing: Containment
) -> None:
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    # tmp_path is visible (writable even); the token file in it is not.
    spec = make_spec(tmp_path, sandbox_writable_paths=(str(tmp_path),))
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(
            RunnerContext(spec, workdir, store, containment=viewing, hidden_paths=(str(token),))
        )
        lease = await make_lease(store, ["/bin/sh", "-c", f"cat {token}; echo end"])
        outcome = await runner.run(lease)
    assert isinstance(outcome, Completed) and outcome.error is None, outcome
    assert await read_bytes(store, Digest.from_proto(outcome.result.stdout_digest, field="")) == (
        b"end\n"
    )
    assert token.read_text() == "secret-token\n"


async def test_directories_of_viewed_actions_are_recycled(
    tmp_path: Path, store: MemoryStore, viewing: Containment
) -> None:
    """The overlay leaves its work directory at mode 0 and a marker in it;
    recycling must clear both, also for an lre that is not root."""
    spec = make_spec(tmp_path, max_inflight_tasks=1)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store, containment=viewing))
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.parts.directories.run)
            for _ in range(4):
                lease = await make_lease(
                    store,
                    ["/bin/sh", "-c", "mkdir -p out && echo o > out/o"],
                    output_paths=("out/o",),
                )
                outcome = await runner.run(lease)
                assert isinstance(outcome, Completed) and outcome.error is None, outcome
            with trio.fail_after(10):
                while runner.parts.directories.recycled < 3:  # noqa: ASYNC110 (thread work)
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()


async def test_the_input_root_keeps_mode_0755_across_recycling(
    tmp_path: Path, store: MemoryStore, viewing: Containment
) -> None:
    """The overlay's upper layer gives the input root its mode: 0755, so that
    a user the action switches to may enter it; an action that chmods its
    root must not hand that mode to the next action in the same directory."""
    spec = make_spec(tmp_path, max_inflight_tasks=1)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store, containment=viewing))
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.parts.directories.run)
            for done in range(3):
                with trio.fail_after(10):
                    while runner.parts.directories.recycled < done:  # noqa: ASYNC110 (thread work)
                        await trio.sleep(0.01)
                lease = await make_lease(store, ["/bin/sh", "-c", "stat -c %a .; chmod 700 ."])
                outcome = await runner.run(lease)
                assert isinstance(outcome, Completed) and outcome.error is None, outcome
                stdout = Digest.from_proto(outcome.result.stdout_digest, field="")
                assert await read_bytes(store, stdout) == b"755\n", done
            assert runner.parts.directories.recycled >= 2
            nursery.cancel_scope.cancel()


async def test_a_views_proc_shows_only_the_action_and_its_stdin_is_empty(
    tmp_path: Path, store: MemoryStore, viewing: Containment
) -> None:
    """pidns mounts the view's /proc from the spawner behind a gate on the
    first process's stdin: the action must see its own namespace there and
    read nothing (not the gate) on stdin."""
    script = (
        "cat /proc/1/cmdline | tr '\\0' ' '; echo; "
        f"test -e /proc/{os.getpid()} && echo lre-seen || ls /proc | grep -c '^[0-9]'; "
        "readlink /proc/self/fd/0; wc -c </dev/stdin"
    )
    spec = make_spec(tmp_path)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store, containment=viewing))
        lease = await make_lease(store, ["/bin/sh", "-c", script])
        outcome = await runner.run(lease)
    assert isinstance(outcome, Completed) and outcome.error is None, outcome
    out = await read_bytes(store, Digest.from_proto(outcome.result.stdout_digest, field=""))
    pid1, processes, stdin, size = out.decode().splitlines()
    # Its own namespace: pid 1 is GNU time reporting the tree's peak
    # (_tree_peak), else timeout (userns) or the gate's sh, which runs the
    # command as its child after "go" (pidns, _pid_namespace.py).
    assert (
        "timeout -- 0 /bin/sh -c cat" in pid1
        or "sh - /bin/sh -c cat" in pid1
        or re.search(r"time -q -f %M -o /proc/self/fd/\d+ -- /bin/sh -c cat", pid1)
    ), out
    assert int(processes) <= 6, out  # pid 1, sh, its pipeline: nothing of lre's
    assert (stdin, size.strip()) == ("/dev/null", "0"), out


async def test_a_view_whose_proc_cannot_be_mounted_runs_nothing(
    tmp_path: Path, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the spawner mounts the view's /proc, a failed mount keeps the
    gate shut: the command never runs (it would see the host's /proc)."""
    containment = backend("pidns")
    if not getattr(containment, "_gate_sh", None):
        pytest.fail("this kernel cannot mount a procfs for a named PID namespace (Linux 6.15+)")

    def refuse(*, read_only: bool = False) -> None:
        raise OSError(1, "fsmount /proc: refused by the test")

    monkeypatch.setattr("lre.worker.containment._pid_namespace.mount_children_proc", refuse)
    marker = tmp_path / "ran"
    spec = make_spec(tmp_path, sandbox_writable_paths=(str(tmp_path),))
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store, containment=containment))
        lease = await make_lease(store, ["/bin/sh", "-c", f"touch {marker}"])
        outcome = await runner.run(lease)
    assert isinstance(outcome, Completed) and outcome.result.exit_code == 125, outcome
    assert not marker.exists()
