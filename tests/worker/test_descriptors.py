"""lre's reserve of descriptors and what running out of them becomes."""

from __future__ import annotations

import errno
import logging
import os
import resource
from collections.abc import Iterator

import pytest

from lre.errors import ResourceExhausted, StatusCode, descriptors_exhausted
from lre.proto import status_pb2
from lre.service._status import rpc_status_of
from lre.worker.directories._disk_full import request_error
from lre.worker.usage._descriptors import SkipLog, keep_reserve, using_reserve


@pytest.fixture
def restored_limit() -> Iterator[tuple[int, int]]:
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        yield limits
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)


def test_the_reserve_keeps_the_soft_limit_below_the_hard_one(
    restored_limit: tuple[int, int],
) -> None:
    _, hard = restored_limit
    assert hard != resource.RLIM_INFINITY and hard > 1024, "needs a finite hard limit"
    assert keep_reserve(128) == 128
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard - 128, hard)
    # A soft limit lower already is left as it is.
    resource.setrlimit(resource.RLIMIT_NOFILE, (600, hard))
    assert keep_reserve(128) == hard - 600
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 600


def test_an_exhausted_call_gets_a_second_try_within_the_reserve(
    restored_limit: tuple[int, int],
) -> None:
    _, hard = restored_limit
    opened = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (opened + 4, hard))
    spare: list[int] = []
    try:
        with pytest.raises(OSError):
            while True:
                spare.append(os.dup(0))
        # Every descriptor under the soft limit is taken; the reserve lets
        # this one read through, and the soft limit is back afterwards.
        assert using_reserve(lambda: len(os.listdir("/proc/self"))) > 0
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (opened + 4, hard)
        with pytest.raises(OSError) as raised:
            os.dup(0)
        assert raised.value.errno == errno.EMFILE
    finally:
        for fd in spare:
            os.close(fd)


def test_a_skipped_task_says_so_once_and_once_when_it_works_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    skips = SkipLog("history: host sample")
    error = OSError(errno.EMFILE, "Too many open files")
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            skips.skip(error)
        skips.ok()
        skips.ok()
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines
    assert "skipped, out of file descriptors" in lines[0]
    assert "works again after 5 skipped" in lines[1]


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE])
def test_running_out_fails_the_request_as_resource_exhausted(code: int) -> None:
    error = OSError(code, os.strerror(code), "/proc/meminfo")
    mapped = descriptors_exhausted(error)
    assert isinstance(mapped, ResourceExhausted) and "out of file descriptors" in mapped.message
    # An action: final (no InfrastructureFailure, so no retry and no pause).
    assert isinstance(request_error(error, "w1", "operations/1"), ResourceExhausted)
    # A call: RESOURCE_EXHAUSTED, which clients retry, not INTERNAL.
    status: status_pb2.Status = rpc_status_of(error)
    assert status.code == StatusCode.RESOURCE_EXHAUSTED
    assert descriptors_exhausted(OSError(errno.EACCES, "no")) is None
