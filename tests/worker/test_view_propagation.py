"""A view's mounts are private: what the host mounts later never reaches a view
that exists, writable or not; the next view shows it, read-only.

Views are built in throwaway threads of this process (``in_view``), so these
need root (CAP_SYS_ADMIN); the same attack through a whole lre, under every
backend and as ``nobody``, is in ``test_view_template_attacks.py``.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lre.worker.view._view import ActionView
from tests._support.view_thread import in_view

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="build_view in this process needs CAP_SYS_ADMIN (root; CI runs as root)",
)


@pytest.fixture
def var_tmp() -> Iterator[Path]:
    """A scratch directory outside ``/tmp`` (which the view covers), a shared
    mount of its own, as ``/`` is on a systemd host: a mount made below it
    later propagates to every namespace copied from here that lets it."""
    path = Path(tempfile.mkdtemp(prefix="lre-propagation-test-", dir="/var/tmp"))
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
    try:
        subprocess.run(["mount", "--make-shared", str(path)], check=True)
        yield path
    finally:
        subprocess.run(["umount", "-R", str(path)], check=True)
        shutil.rmtree(path)


def _view_in(base: Path, n: int) -> ActionView:
    action = base / f"a{n}"
    for part in ("root", "tmp", "view/upper", "view/work"):
        (action / part).mkdir(parents=True)
    return ActionView(
        root=str(action / "root"),
        upper=str(action / "view/upper"),
        work=str(action / "view/work"),
        tmp=str(action / "tmp"),
        xattrs="trusted",
    )


def _mount_tmpfs(path: Path) -> None:
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "mode=1777,size=1m", "lre-late", str(path)], check=True
    )


def _write(path: Path) -> str:
    """Try to write ``path`` from inside a view: "written" or the errno's name."""
    try:
        path.write_text("planted by an action\n")
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, str(error))
    return "written"


def test_a_host_mount_made_while_an_action_runs_never_reaches_it(var_tmp: Path) -> None:
    """Attack: an action waits in its view until the host mounts a writable
    filesystem inside a path it sees, then writes there. The mount never
    arrives (a slave view got it, writable), and the write meets the
    read-only directory below. The next view shows it, read-only."""
    late = var_tmp / "late"
    late.mkdir()
    ready, mounted = threading.Event(), threading.Event()

    def attack() -> tuple[bool, str]:
        ready.set()
        assert mounted.wait(30)
        return (late / "marker").exists(), _write(late / "planted")

    result: list[tuple[bool, str]] = []
    thread = threading.Thread(target=lambda: result.append(in_view(_view_in(var_tmp, 0), attack)))
    thread.start()
    try:
        assert ready.wait(30)
        _mount_tmpfs(late)
        (late / "marker").write_text("host\n")
    finally:
        mounted.set()
        thread.join()
    assert result == [(False, "EROFS")]

    def later() -> tuple[bool, str]:
        return (late / "marker").exists(), _write(late / "planted-later")

    assert in_view(_view_in(var_tmp, 1), later) == (True, "EROFS")
    assert sorted(os.listdir(late)) == ["marker"]
