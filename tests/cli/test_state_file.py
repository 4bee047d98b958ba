"""lre's files in its state dir (pid file, start.json, the effective config,
repos.json) are written whole and owner-only, whatever the umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lre.cli._daemon import RunningServer, pid_file, read_pid_file, write_pid_file
from lre.cli._state_file import write_state_file


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_state_file_is_owner_only_in_an_owner_only_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    old_umask = os.umask(0o022)
    try:
        write_state_file(state, "start.json", "{}")
    finally:
        os.umask(old_umask)
    assert _mode(state) == 0o700
    assert _mode(state / "start.json") == 0o600
    assert os.listdir(state) == ["start.json"]


def test_a_state_file_is_replaced_whole(tmp_path: Path) -> None:
    write_state_file(tmp_path, "repos.json", "a much longer first text")
    write_state_file(tmp_path, "repos.json", "short")
    assert (tmp_path / "repos.json").read_text(encoding="utf-8") == "short"
    assert os.listdir(tmp_path) == ["repos.json"]


def test_the_pid_file_reads_back_what_was_written(tmp_path: Path) -> None:
    server = RunningServer(
        pid=os.getpid(),
        grpc_address="127.0.0.1:1",
        status_address="127.0.0.1:2",
        repo="",
        log_file="lre.log",
        started=1.0,
    )
    write_pid_file(tmp_path, server)
    assert _mode(pid_file(tmp_path)) == 0o600
    assert read_pid_file(tmp_path) == server
