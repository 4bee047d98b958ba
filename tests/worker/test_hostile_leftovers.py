"""Actions that leave a mount in their directory: lre's clean-up detaches it
and never deletes the files of the directory mounted there."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from lre.worker import Containment

from .test_containment import backend
from .test_hostile_actions import run, runner_with_janitor
from .test_removal import mounted_below, need_root, scrub


@pytest.fixture(params=["pidns", "portable"])
def containment(request: pytest.FixtureRequest) -> Containment:
    # userns actions have no right to mount in lre's namespace at all.
    return backend(request.param)


@pytest.fixture(autouse=True)
def scrubbed(tmp_path: Path) -> Iterator[None]:
    yield
    scrub(tmp_path)


async def test_an_action_bind_mounting_a_host_directory_cannot_make_lre_delete_it(
    tmp_path: Path, containment: Containment
) -> None:
    need_root("mounting from inside an action")
    host = tmp_path / "users-files"
    (host / "src").mkdir(parents=True)
    (host / "precious").write_text("keep me\n")
    (host / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    async with runner_with_janitor(tmp_path, containment) as (runner, store):
        script = f"mkdir -p mnt/deeper && mount --bind {host} mnt && mount -t tmpfs tmpfs mnt/src"
        outcome = await run(runner, store, script)
        assert outcome.error is None
        if runner.parts.view_policy is None:
            assert outcome.result.exit_code == 0  # the mounts are made: lre must cope
        # In a view (pidns) the host directory is not there to mount (the
        # view's /tmp is the action's own): the attack fails by construction.
        # Later actions get the recycled directories meanwhile.
        for _ in range(3):
            later = await run(runner, store, "true")
            assert later.result.exit_code == 0
        deadline = time.monotonic() + 30
        # Polling the mount table: no event says the janitor's batch is done.
        while mounted_below(tmp_path / "work") and time.monotonic() < deadline:  # noqa: ASYNC110
            await trio.sleep(0.05)
        assert mounted_below(tmp_path / "work") == []
    assert (host / "precious").read_text() == "keep me\n"
    assert (host / "src" / "main.c").exists()


async def test_an_output_directory_holding_a_bind_mount_never_moves_the_hosts_files(
    tmp_path: Path, containment: Containment
) -> None:
    # Files reached through a mount in an output directory are lre's user's
    # own with one link, like the action's: they must be copied into the CAS,
    # never moved (renamed away or unlinked) nor chmodded.
    need_root("mounting from inside an action")
    host = tmp_path / "users-files"
    host.mkdir()
    (host / "precious").write_text("keep me\n")
    (host / "tool").write_text("#!/bin/sh\n")
    os.chmod(host / "tool", 0o700)
    (host / "shared").write_text("same as an output\n")
    async with runner_with_janitor(tmp_path, containment) as (runner, store):
        script = (
            f"mkdir -p out/src && echo 'same as an output' > out/own && mount --bind {host} out/src"
        )
        outcome = await run(runner, store, script, output_paths=("out",))
        assert outcome.error is None, outcome.error
        if runner.parts.view_policy is None:
            assert outcome.result.exit_code == 0  # mounted in lre's namespace
            (directory,) = outcome.result.output_directories
            assert directory.tree_digest.size_bytes > 0
        deadline = time.monotonic() + 30
        while mounted_below(tmp_path / "work") and time.monotonic() < deadline:  # noqa: ASYNC110
            await trio.sleep(0.05)
    assert (host / "precious").read_text() == "keep me\n"
    assert (host / "shared").read_text() == "same as an output\n"
    assert stat.S_IMODE(os.stat(host / "tool").st_mode) == 0o700
