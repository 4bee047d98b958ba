"""A real lre started over leftovers it cannot delete: it starts and serves,
moves them into its quarantine, says so (log, ``lre doctor``, ``lre cache``)
and removes them once that becomes possible (``lre/worker/directories/_quarantine.py``)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lre.worker import quarantined
from tests._support.configs import WORKER_EXTRA, app_config_text
from tests._support.reapi import Client
from tests._support.servers import ServerThread

from .test_removal import make_deep, mounted_below, need_root, scrub


@pytest.fixture(autouse=True)
def scrubbed(tmp_path: Path) -> Iterator[None]:
    yield
    scrub(tmp_path)


@pytest.fixture
def host_files(tmp_path: Path) -> Path:
    host = tmp_path / "users-files"
    host.mkdir()
    (host / "precious").write_text("keep me\n")
    return host


def leave_leftovers(worker: Path, host: Path) -> None:
    """What crashed actions of an earlier run left in the worker's directory."""
    (worker / "a1" / "root").mkdir(parents=True)
    (worker / "a1" / "root" / "immutable").write_text("chattr +i\n")
    subprocess.run(["chattr", "+i", str(worker / "a1" / "root" / "immutable")], check=True)
    (worker / "a2" / "root" / "mnt").mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(host), str(worker / "a2" / "root" / "mnt")], check=True)
    (worker / "a3").mkdir()
    make_deep(worker / "a3" / "root")
    (worker / "a4" / "root" / "x" / "y").mkdir(parents=True)
    (worker / "a4" / "root" / "x" / "y" / "f").write_text("x")
    os.chmod(worker / "a4" / "root" / "x" / "y", 0)
    os.chmod(worker / "a4" / "root" / "x", 0)


def lre_cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lre", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=config.parent,
    )


def test_lre_starts_over_leftovers_it_cannot_delete_and_quarantines_them(
    tmp_path: Path, host_files: Path, caplog: pytest.LogCaptureFixture
) -> None:
    need_root("chattr +i and mounting")
    root = tmp_path / "lre-root"
    worker = root / "work" / "local"
    leave_leftovers(worker, host_files)
    text = app_config_text(root, extra_worker=WORKER_EXTRA)
    server = ServerThread(root, text)
    with caplog.at_level(logging.WARNING, logger="lre"):
        ready = server.start()
    try:
        with Client(ready.grpc_addresses[0]) as client:
            response = client.run(["/bin/sh", "-c", "echo served"])
            assert response.status.code == 0, response.status
            assert response.result.exit_code == 0
            assert client.stdout(response.result) == b"served\n"
    finally:
        server.stop()
    # The host's files were never deleted through the mount, and it is gone.
    assert (host_files / "precious").read_text() == "keep me\n"
    assert mounted_below(root) == []
    # What could be deleted was (deep and mode-000 trees included); the
    # immutable file was moved aside, with the reason.
    entries = quarantined(worker)
    assert [entry.path.name.split(".")[0] for entry in entries] == ["a1"]
    assert "Operation not permitted" in entries[0].reason
    assert "immutable" in entries[0].reason
    assert (entries[0].path / "root" / "immutable").exists()
    assert set(os.listdir(worker)) - {"linked-inputs.journal"} == {".lock", ".quarantine"}
    quarantine_logs = [r for r in caplog.records if "stay in" in r.getMessage()]
    assert len(quarantine_logs) == 1, [r.getMessage() for r in caplog.records]
    assert "a1." in quarantine_logs[0].getMessage()

    # lre doctor and lre cache say so, with what to do.
    config = tmp_path / "lre.json5"
    config.write_text(text)
    doctor = lre_cli(config, "doctor", "--json")
    checks = {check["name"]: check for check in json.loads(doctor.stdout)["checks"]}
    assert checks["quarantine"]["status"] == "WARN", checks["quarantine"]
    assert str(entries[0].path) in checks["quarantine"]["message"]
    assert "chattr -i" in checks["quarantine"]["fix"]
    cache = lre_cli(config, "cache")
    assert cache.returncode == 0, cache.stderr
    assert "quarantine: 1 leftover" in cache.stdout
    assert str(entries[0].path) in cache.stdout

    # Once the cause is undone, the next start removes it.
    subprocess.run(["chattr", "-i", str(entries[0].path / "root" / "immutable")], check=True)
    again = ServerThread(root, text)
    again.start()
    again.stop()
    assert quarantined(worker) == []
    assert not (worker / ".quarantine").exists()
    doctor = lre_cli(config, "doctor", "--json")
    checks = {check["name"]: check for check in json.loads(doctor.stdout)["checks"]}
    assert checks["quarantine"]["status"] == "OK"


async def test_the_janitor_retries_the_quarantine(tmp_path: Path, autojump_clock: object) -> None:
    need_root("chattr +i")
    import trio

    from lre.worker.directories._action_dirs import ActionDirectories
    from lre.worker.directories._quarantine import RETRY_S
    from lre.worker.directories._workdir import WorkDirectory

    leftover = tmp_path / "work" / "w" / "a1"
    leftover.mkdir(parents=True)
    (leftover / "immutable").write_text("x")
    subprocess.run(["chattr", "+i", str(leftover / "immutable")], check=True)  # noqa: ASYNC221
    with WorkDirectory.open(tmp_path / "work", "w") as workdir:
        (entry,) = quarantined(workdir.path)
        directories = ActionDirectories(workdir, stock=1)
        async with trio.open_nursery() as nursery:
            await nursery.start(directories.run)
            subprocess.run(["chattr", "-i", str(entry.path / "immutable")], check=True)  # noqa: ASYNC221
            # The retry runs in a thread, which the autojump clock does not
            # wait for: step virtual time until it has run (bounded in real time).
            deadline = time.monotonic() + 30
            while (workdir.path / ".quarantine").exists() and time.monotonic() < deadline:  # noqa: ASYNC110
                await trio.sleep(RETRY_S / 4)
            assert quarantined(workdir.path) == []
            assert not (workdir.path / ".quarantine").exists()
            nursery.cancel_scope.cancel()
