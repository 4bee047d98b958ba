"""Attacks on lre through the devices an action's view shows, per backend.

Like ``test_view_attacks.py`` (whose lre, outcomes and ``_verdict`` these
share), but with the workers' default ``action_user: "root"``: a root lre's
actions are then root in their namespace, the identity device nodes were
made for. The view's ``/dev`` must hold only what builds need
(``lre/worker/view/_view_dev.py``), and nothing the action may write may hold a
device node that opens (its writable mounts are ``nodev``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._support.lre_as import SETUPS
from tests.worker.test_view_attacks import Lre, _python, _start, _verdict

#: What an action's /dev holds (docs/security.md, "The view").
ALLOWED_DEV = {
    *("null", "zero", "full", "random", "urandom", "tty"),
    *("fd", "stdin", "stdout", "stderr", "ptmx", "pts", "shm"),
}
#: (backend, attack) known not to hold: portable makes no view, so its
#: actions see the host's /dev.
KNOWN_MISSING = {("portable", "dev-open-state-disk"), ("portable", "dev-lists-host-devices")}


#: (backend, lre's user, action_user): the shape attack_report.describe reads.
_SETUPS = tuple((b, i, "root") for b, i in SETUPS)


@pytest.fixture(scope="module", params=_SETUPS, ids=[f"{b}-{i}-actions-{a}" for b, i, a in _SETUPS])
def lre(request: pytest.FixtureRequest) -> Iterator[Lre]:
    backend, identity, action_user = request.param
    yield from _start(backend, identity, action_user)


def _state_disk(home: Path) -> tuple[int, int]:
    """major, minor of the block device holding ``home`` (lre's state, CAS
    and action cache); where that is no block device (an overlay or tmpfs:
    major 0), the first block device a mount of this host is made of."""
    dev = os.stat(home).st_dev
    if os.major(dev) != 0:
        return os.major(dev), os.minor(dev)
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            major, minor = (int(n) for n in line.split()[2].split(":"))
            if major != 0:
                return major, minor
    pytest.fail("no mount of this host is on a block device: nothing to attack")


_OPEN_DISK = """
import json, os, stat
disk, null = os.makedev({major}, {minor}), os.makedev(1, 3)
listed, opened, made = [], [], {{}}
for parent, dirs, files in os.walk("/dev"):
    for name in dirs + files:
        path = os.path.join(parent, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISBLK(st.st_mode) and st.st_rdev == disk:
            listed.append(path)
candidates = list(listed)
# Every place the action may write: its input root, TMPDIR, /tmp, /dev/shm.
# A node of /dev/null made there shows whether that mount lets any node
# open (an outer policy may refuse the disk itself, never /dev/null).
for where in (os.getcwd(), os.environ.get("TMPDIR", ""), "/tmp", "/dev/shm"):
    for kind, mode, rdev in (("disk", stat.S_IFBLK, disk), ("null", stat.S_IFCHR, null)):
        path = os.path.join(where or "/nonexistent", "lre-attack-" + kind)
        try:
            os.mknod(path, 0o600 | mode, rdev)
        except OSError as error:
            made[path] = error.strerror
            continue
        made[path] = "made"
        candidates.append(path)
for path in candidates:
    try:
        os.close(os.open(path, os.O_RDWR))  # opened, never written
        opened.append(path)
    except OSError as error:
        made.setdefault(path, error.strerror)
print(json.dumps({{"listed": listed, "opened": opened, "made": made}}))
"""


@pytest.mark.attack("dev: an action opens the disk holding lre's state read-write")
def test_open_the_disk_holding_lres_state(lre: Lre) -> None:
    """A node of that disk anywhere under /dev, or one the action makes
    with mknod where it may write: a root action (root lre, default
    ``action_user``) opens it read-write, and could rewrite any block of
    the CAS, the action cache or lre's state. Held only when no node of it
    is in the view at all (whatever refuses opening it: some hosts refuse
    even root) and no node made on a writable mount opens."""
    major, minor = _state_disk(lre.home)
    out = _python(lre, _OPEN_DISK.format(major=major, minor=minor))
    found = json.loads(out.decode().strip().splitlines()[-1])
    _verdict(
        lre,
        "dev-open-state-disk",
        found["listed"] == [] and found["opened"] == [],
        json.dumps(found),
        missing=(lre.backend, "dev-open-state-disk") in KNOWN_MISSING,
    )


@pytest.mark.attack("dev: an action's /dev shows the host's devices")
def test_dev_holds_only_what_builds_need(lre: Lre) -> None:
    """The host's /dev lists disks, loop devices, /dev/kmsg, /dev/kvm,
    /dev/fuse, ttys...; the view's holds only ``ALLOWED_DEV``, and its
    /dev/pts is a new instance (only ptmx until the action opens a pty)."""
    script = "import json, os; print(json.dumps([os.listdir('/dev'), os.listdir('/dev/pts')]))"
    names, pts = json.loads(_python(lre, script).decode().strip().splitlines()[-1])
    extra = sorted(set(names) - ALLOWED_DEV)
    _verdict(
        lre,
        "dev-lists-host-devices",
        extra == [] and pts == ["ptmx"],
        f"extra {extra[:20]} pts {pts[:10]}",
        missing=(lre.backend, "dev-lists-host-devices") in KNOWN_MISSING,
    )


_PTY = """
import os, pty
pid, fd = pty.fork()
if pid == 0:
    os.execvp("sh", ["sh", "-c", "tty; echo via-dev-tty > /dev/tty; stty size"])
out = b""
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:  # EIO: the child's side closed
        break
    if not chunk:
        break
    out += chunk
_, status = os.waitpid(pid, 0)
print(out.decode(errors="replace").replace("\\r", ""), "exit", os.waitstatus_to_exitcode(status))
"""


def test_a_pty_works_in_the_view(lre: Lre) -> None:
    """Programs that open a pseudo-terminal (``pty.fork``, ``script``) work:
    /dev/ptmx leads to the view's own devpts instance, whose first pty is 0,
    and the child's /dev/tty is it."""
    out = _python(lre, _PTY).decode()
    first = "/dev/pts/" if lre.backend == "portable" else "/dev/pts/0"
    assert out.startswith(first), out
    assert "via-dev-tty" in out and out.rstrip().endswith("exit 0"), out
    response = lre.client.run(["script", "-qec", "tty", "/dev/null"])
    assert response.status.code == 0, response.status
    assert response.result.exit_code == 0, lre.client.stderr(response.result)
    assert lre.client.stdout(response.result).startswith(first.encode()), response.result
