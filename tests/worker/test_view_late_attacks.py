"""Attacks through a real lre on what the host changes after lre started.

A mount the host makes later (while an action runs, or before the next one)
must not be writable from an action, and one of the host's command-socket
directories that appears later must be masked. lre runs under pidns
(root), userns (root) and userns as ``nobody``; the attacker's files are
outside ``/tmp``, which views hide.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_view_attacks import Lre, _sh, _start

_SETUPS = (("pidns", "own"), ("userns", "own"), ("userns", "nobody"))


@pytest.fixture(scope="module")
def socket_dirs() -> Iterator[tuple[Path, Path]]:
    """lre's ``$XDG_RUNTIME_DIR`` and ``$SCREENDIR`` (views mask both:
    ``_socket_masks``), neither there when it starts. The second lies in a
    directory others may enter but not read (0711)."""
    scratch = Path(tempfile.mkdtemp(prefix="lre-late-sockets-", dir="/var/tmp"))
    os.chmod(scratch, 0o755)  # lre run as nobody reaches inside
    closed = scratch / "closed"
    closed.mkdir(mode=0o711)
    os.chmod(closed, 0o711)
    paths = (scratch / "runtime", closed / "screens")
    before = {name: os.environ.get(name) for name in ("XDG_RUNTIME_DIR", "SCREENDIR")}
    os.environ["XDG_RUNTIME_DIR"], os.environ["SCREENDIR"] = map(str, paths)
    try:
        yield paths
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="module", params=_SETUPS, ids=[f"{b}-{i}" for b, i in _SETUPS])
def lre(request: pytest.FixtureRequest, socket_dirs: tuple[Path, Path]) -> Iterator[Lre]:
    if os.geteuid() != 0:
        pytest.skip("mounting on the host and running lre as nobody need root (CI runs as root)")
    backend, identity = request.param
    yield from _start(backend, identity, "root")


def _mount_tmpfs(path: Path) -> None:
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "mode=1777,size=1m", "lre-late", str(path)], check=True
    )


def _pid_running(token: str, within: float = 30) -> None:
    """Wait until some process's command line holds ``token`` (the action)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    if token.encode() in cmdline.read():
                        return
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError("the waiting action never started")


def test_a_host_mount_made_after_lre_started_is_never_writable(lre: Lre) -> None:
    """Attack: one action already waiting in its view, and one started after
    the host mounted a writable tmpfs inside a directory actions see, each
    write into it. Neither write lands (the view is private: the running
    action never gets the mount; the next one gets it read-only, under
    pidns, or not at all, under userns, whose helper is private too)."""
    _sh(lre, "true")  # lre has made views before the mount
    point, go = lre.home / "late", lre.home / "go"
    point.mkdir()
    token = os.urandom(6).hex()
    waiting = (
        f": {token}; [ -d {point} ] && echo sees-the-directory; "
        f"while [ ! -e {go} ]; do sleep 0.05; done; "
        f"cat {point}/marker 2>/dev/null; echo x > {point}/planted 2>/dev/null && echo written"
    )
    outputs: list[bytes] = []
    runner = threading.Thread(target=lambda: outputs.append(_sh(lre, waiting)[1]))
    runner.start()
    mounted = False
    try:
        _pid_running(token)
        _mount_tmpfs(point)
        mounted = True
        (point / "marker").write_text("host mount\n")
        go.touch()
        runner.join(60)
        assert outputs, "the waiting action did not finish"
        _, later, _ = _sh(
            lre,
            f"[ -d {point} ] && echo sees-the-directory; cat {point}/marker 2>/dev/null; "
            f"echo x > {point}/planted-later 2>/dev/null && echo written",
        )
        assert sorted(os.listdir(point)) == ["marker"], (outputs, later)
    finally:
        go.touch()
        runner.join(60)
        if mounted:
            subprocess.run(["umount", str(point)], check=True)
    # Both attacks ran where the mount would be.
    assert outputs[0] == b"sees-the-directory\n"
    if lre.backend == "pidns":  # views are made from lre's namespace: it shows, read-only
        assert later == b"sees-the-directory\nhost mount\n"
    else:
        assert later == b"sees-the-directory\n"


def test_a_socket_directory_made_after_lre_started_is_masked(
    lre: Lre, socket_dirs: tuple[Path, Path]
) -> None:
    """Attack: the host's runtime and screen directories (where a session
    bus, an agent or a terminal multiplexer would listen) appear after lre
    made its first views; an action reads what is in them. It sees empty
    masks (one of them in a directory lre run as nobody cannot read)."""
    _sh(lre, "true")  # lre has made views before the directories
    seen = []
    try:
        for path in socket_dirs:  # one at a time: each must be masked on its own
            path.mkdir(mode=0o755)
            (path / "bus").write_text("a socket would be here\n")
            os.chmod(path / "bus", 0o644)
            seen.append(_sh(lre, f"[ -d {path} ] && echo sees-{path.name}; ls -A {path}")[1])
    finally:
        for path in socket_dirs:
            shutil.rmtree(path, ignore_errors=True)
    assert seen == [b"sees-runtime\n", b"sees-screens\n"]
