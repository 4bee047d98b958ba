"""pid 1's report of the command tree's peak (``lre.worker.usage._tree_peak``):
what counts as a report, and finding GNU time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lre.worker.usage import _tree_peak
from lre.worker.usage._tree_peak import (
    MAX_REPORT_BYTES,
    open_report,
    parse_report,
    peak_tool,
    peak_tool_missing,
    read_report,
)
from tests._support.ci import in_ci

RAM_KIB = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 1024


def test_one_line_of_kib_is_a_figure() -> None:
    assert parse_report(b"1452\n") == 1452 * 1024
    assert parse_report(b"%d\n" % RAM_KIB) == RAM_KIB * 1024


def test_more_than_the_machine_s_ram_is_no_figure() -> None:
    # "9999999" the action wrote through time's own descriptor, then time's
    # "1452\n" after it: one line of digits, larger than any resident set
    assert parse_report(b"99999991452\n") == 0
    assert parse_report(b"%d\n" % (RAM_KIB + 1)) == 0


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\n",
        b"0\n",  # no process has no memory
        b"1452",  # no line end: time did not finish writing
        b"1\n1452\n",  # the action's line before time's
        b"1452\n1\n",  # ... or after it
        b"99999999 lre\n",
        b" 1452\n",
        b"-5\n",
        b"0x10\n",
        b"1452\r\n",
        "١٤٥٢\n".encode(),  # digits int() would take
        b"1" * 13 + b"\n",  # longer than any real figure
        b"\xff\xfe\n",
    ],
)
def test_anything_else_is_no_figure(garbage: bytes) -> None:
    assert parse_report(garbage) == 0


def test_a_report_file_is_read_whole_and_never_raises() -> None:
    fd = open_report()
    try:
        assert read_report(fd) == 0  # pid 1 wrote nothing
        os.write(fd, b"2048\n")
        assert read_report(fd) == 2048 * 1024
        # an action that filled the file: no figure, and no read of it all
        os.write(fd, b"7" * (1 << 20))
        assert read_report(fd) == 0
        os.ftruncate(fd, 0)
        os.pwrite(fd, b"4096\n", 0)
        assert read_report(fd) == 4096 * 1024
        assert os.fstat(fd).st_size <= MAX_REPORT_BYTES
    finally:
        os.close(fd)
    assert read_report(fd) == 0  # closed: no figure, no error


def test_gnu_time_is_found_and_probed() -> None:
    if peak_tool() is None:
        if in_ci():
            pytest.fail(f"GNU time is needed (.ci/run installs it): {peak_tool_missing()}")
        pytest.skip(f"GNU time is not usable here: {peak_tool_missing()}")
    assert peak_tool_missing() is None


def test_a_missing_tool_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tree_peak, "TOOL", "lre-test-no-such-time")
    monkeypatch.setattr(_tree_peak, "_probed", [])
    assert peak_tool() is None
    assert peak_tool_missing() == "GNU lre-test-no-such-time is not on PATH"


def test_a_tool_that_writes_no_figure_is_not_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A ``time`` that runs the command but is not GNU time (it ignores
    ``-o``): probed at start-up, not used."""
    fake = tmp_path / "time"
    fake.write_text('#!/bin/sh\nwhile [ "$1" != -- ]; do shift; done; shift; exec "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ.get('PATH', '')}")
    monkeypatch.setattr(_tree_peak, "_probed", [])
    assert peak_tool() is None
    assert "wrote no %M figure" in (peak_tool_missing() or "")
