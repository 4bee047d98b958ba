"""Single-line structured logs."""

from __future__ import annotations

import io
import logging
import logging.handlers
import os
import re
import stat
from pathlib import Path

import pytest

from lre.app._logging import (
    LineFormatter,
    configure_logging,
    format_fields,
    log_file,
    log_rejected,
    parse_level,
)

LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) \S+ .*$")


@pytest.fixture
def restore_root() -> object:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


def test_format_fields_quotes_only_when_needed() -> None:
    assert format_fields({"a": 1, "b": "x y", "c": 'q"\n', "d": ""}) == (
        'a=1 b="x y" c="q\\"\\n" d=""'
    )
    assert format_fields({"path": "/a/b-c_d.e:1"}) == "path=/a/b-c_d.e:1"


def test_record_is_one_line_with_fields_and_traceback(restore_root: object) -> None:
    stream = io.StringIO()
    configure_logging("debug", stream=stream)
    log = logging.getLogger("lre.test")
    log.info("started %s", "worker\nlocal", extra={"kv": {"cpus": 8, "dir": "/tmp/a b"}})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    log.debug("details")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert all(LINE.match(line) for line in lines), lines
    first = lines[0].split(" ", 3)
    assert first[1:3] == ["INFO", "lre.test"]
    assert first[3] == 'started worker\\nlocal cpus=8 dir="/tmp/a b"'
    assert lines[1].split(" ", 3)[1] == "ERROR"
    assert 'exc="Traceback (most recent call last):\\n' in lines[1]
    assert "ValueError: boom" in lines[1]


def test_level_filters_and_rejects_unknown_level(restore_root: object) -> None:
    stream = io.StringIO()
    configure_logging("warning", stream=stream)
    logging.getLogger("lre.x").info("hidden")
    logging.getLogger("lre.x").warning("shown")
    assert [line.split(" ")[1] for line in stream.getvalue().splitlines()] == ["WARNING"]
    with pytest.raises(ValueError, match="log_level: 'loud' is not one of debug, info"):
        parse_level("loud")


def test_reconfigure_replaces_handler_and_writes_file(
    tmp_path: Path, restore_root: logging.Logger
) -> None:
    first = io.StringIO()
    configure_logging("info", stream=first)
    path = log_file(tmp_path / "state")
    handler = configure_logging("info", file=path)
    logging.getLogger("lre.y").info("to the file")
    handler.flush()
    ours = [h for h in restore_root.handlers if isinstance(h.formatter, LineFormatter)]
    assert ours == [handler]
    assert first.getvalue() == ""
    assert path == tmp_path / "state" / "lre.log"
    assert path.read_text().endswith(" INFO lre.y to the file\n")


def test_log_rejected_once_without_traceback(restore_root: object) -> None:
    stream = io.StringIO()
    configure_logging("info", stream=stream)
    log_rejected(
        logging.getLogger("lre.service"),
        "Execute",
        status="INVALID_ARGUMENT",
        reason="digest: 'xyz' is not 64 hex digits",
        peer="ipv4:127.0.0.1:5000",
    )
    (line,) = stream.getvalue().splitlines()
    assert line.split(" ", 3)[3] == (
        "rejected Execute status=INVALID_ARGUMENT reason=\"digest: 'xyz' is not 64 hex digits\""
        " peer=ipv4:127.0.0.1:5000"
    )


def test_log_file_and_its_rotations_are_owner_only(
    tmp_path: Path, restore_root: logging.Logger
) -> None:
    path = log_file(tmp_path / "state")
    old_umask = os.umask(0o022)
    try:
        handler = configure_logging("info", file=path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert isinstance(handler, logging.handlers.RotatingFileHandler)
        logging.getLogger("lre.z").info("before the rollover")
        handler.doRollover()
        logging.getLogger("lre.z").info("after the rollover")
        handler.flush()
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.with_name("lre.log.1").stat().st_mode) == 0o600


def test_a_log_an_older_lre_left_world_readable_is_narrowed(
    tmp_path: Path, restore_root: logging.Logger
) -> None:
    path = log_file(tmp_path)
    path.write_text("old line\n")
    path.chmod(0o644)
    configure_logging("info", file=path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "old line\n"


def test_trios_accept_complaints_are_logged_once_a_minute_without_a_traceback() -> None:
    # Out of file descriptors, Trio's accept loop complains every 0.1 s
    # with a traceback; lre's log keeps one line of it per minute.
    accept = logging.getLogger("trio.serve_listeners")
    for earlier in list(accept.filters):  # a fresh minute for this test
        accept.removeFilter(earlier)
    stream = io.StringIO()
    handler = configure_logging("info", stream=stream)
    try:
        for _ in range(20):
            try:
                raise OSError(24, "Too many open files")
            except OSError:
                accept.error("accept returned EMFILE (Too many open files)", exc_info=True)
        configure_logging("info", stream=stream)  # again: still one filter
        accept.error("accept returned EMFILE (Too many open files)")
    finally:
        handler.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "accept returned EMFILE" in lines[0] and "Traceback" not in stream.getvalue()
