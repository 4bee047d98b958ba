"""The userns backend's view helper process: it starts, answers, and is
closed and reaped (it must never be left running or unreaped)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import pytest

from lre.worker.view._view_helper import ViewHelper


@dataclass
class _View:
    root: str = "/nonexistent"


def _helper() -> ViewHelper:
    unshare, nsenter = shutil.which("unshare"), shutil.which("nsenter")
    assert unshare is not None and nsenter is not None, "util-linux is needed"
    helper = ViewHelper(unshare, nsenter)
    try:
        helper.start()
    except OSError as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no user namespaces here: {error}")
    return helper


def test_close_ends_and_reaps_the_helper() -> None:
    helper = _helper()
    pid = helper.pid
    helper.close()
    # Reaped: the pid is no child of ours any more.
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    with pytest.raises(OSError, match="not running"):
        helper.build(_View())
    helper.close()  # twice is harmless
