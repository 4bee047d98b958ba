"""The view's /dev (``lre/worker/view/_view_dev.py``) and the ``nodev`` of what an
action may write, seen from inside: in a real action (pidns and userns) and
in a view built by ``build_view`` in a thread of this process (both ways
of making the tree: a template cloned per action, or built per action)."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import json
import os
from pathlib import Path

import pytest

from lre.worker import Containment
from lre.worker.process._process import SpawnRequest, run_process
from lre.worker.view import _view_dev
from lre.worker.view._view import ActionView
from lre.worker.view._view_dev import DEVICES, LINKS, NAMES, DevTree
from tests._support.view_thread import in_view

from .test_containment import backend

#: Run in the view (cwd: the input root): what its /dev holds, and whether a
#: device node made where it may write opens.
_INSPECT = """
import errno, json, os, stat
report = {"names": sorted(os.listdir("/dev")), "nodes": {}, "links": {}, "made": {}, "flags": {}}
for name in report["names"]:
    path = "/dev/" + name
    st = os.lstat(path)
    if stat.S_ISCHR(st.st_mode):
        report["nodes"][name] = [os.major(st.st_rdev), os.minor(st.st_rdev)]
    elif stat.S_ISLNK(st.st_mode):
        report["links"][name] = os.readlink(path)
report["pts"] = sorted(os.listdir("/dev/pts"))
report["pts_dev"] = os.stat("/dev/pts").st_dev
with open("/dev/null", "w") as null:
    null.write("dropped")
with open("/dev/zero", "rb") as zero:
    report["zero"] = zero.read(4).hex()
try:
    with open("/dev/full", "w") as full:
        full.write("x")
        full.flush()
except OSError as error:
    report["full"] = errno.errorcode[error.errno]
try:
    open("/dev/planted", "w").close()
    report["planted"] = "made"
except OSError as error:
    report["planted"] = errno.errorcode[error.errno]
for where in (os.getcwd(), os.environ["TMPDIR"], "/tmp", "/dev/shm"):
    flags = os.statvfs(where).f_flag
    report["flags"][where] = [bool(flags & os.ST_NODEV), bool(flags & os.ST_NOSUID)]
    path = os.path.join(where, "node")
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError as error:
        report["made"][where] = "mknod " + errno.errorcode[error.errno]
        continue
    try:
        os.close(os.open(path, os.O_WRONLY))
        report["made"][where] = "opened"
    except OSError as error:
        report["made"][where] = "open " + errno.errorcode[error.errno]
    os.unlink(path)
print(json.dumps(report))
"""


def _host_nodes() -> dict[str, list[int]]:
    nodes = {}
    for name in DEVICES:
        try:
            rdev = os.stat(f"/dev/{name}").st_rdev
        except FileNotFoundError:
            continue
        nodes[name] = [os.major(rdev), os.minor(rdev)]
    return nodes


def _check(report: dict[str, object], *, root: bool) -> None:
    """What every view's /dev must show (``report`` from ``_INSPECT``);
    ``root``: whoever inspects holds CAP_MKNOD (a node it makes must then not
    open: every mount it may write is nodev)."""
    nodes = _host_nodes()
    assert report["names"] == sorted(NAMES - (set(DEVICES) - set(nodes))), report["names"]
    assert report["nodes"] == nodes  # the host's own devices, nothing else
    assert report["links"] == LINKS
    assert report["pts"] == ["ptmx"]  # a new devpts: no pty of anyone else
    assert report["pts_dev"] != os.stat("/dev/pts").st_dev
    assert report["zero"] == "00000000"
    assert report["full"] == "ENOSPC"
    assert report["planted"] == "EROFS"
    # nodev and nosuid on every writable mount, whoever may mknod there
    flags = report["flags"]
    assert isinstance(flags, dict) and len(flags) == 4, report
    assert all(f == [True, True] for f in flags.values()), flags
    made = report["made"]
    assert isinstance(made, dict) and len(made) == 4, made
    for where, outcome in made.items():
        # root may mknod, but no writable mount lets the node open
        expected = "open EACCES" if root else "mknod EPERM"
        assert outcome == expected, (where, made)


def _scratch_view(tmp_path: Path) -> ActionView:
    for name in ("root", "tmp", "upper", "work"):
        (tmp_path / name).mkdir()
    os.chmod(tmp_path / "tmp", 0o700)
    return ActionView(
        root=str(tmp_path / "root"),
        upper=str(tmp_path / "upper"),
        work=str(tmp_path / "work"),
        tmp=str(tmp_path / "tmp"),
        xattrs="trusted",
    )


@pytest.fixture(params=["pidns", "userns"])
def viewing(request: pytest.FixtureRequest) -> Containment:
    containment = backend(request.param)
    assert containment.can_view, f"{request.param} gives actions no view here"
    return containment


async def test_an_actions_dev_holds_only_what_builds_need(
    tmp_path: Path, viewing: Containment
) -> None:
    """A real action (under the userns helper too, which loads _view_dev.py
    by its file name) sees the small /dev, and no mount it may write lets
    a device node it made open."""
    view = dataclasses.replace(_scratch_view(tmp_path), xattrs=viewing.overlay_xattrs)
    outcome = await run_process(
        SpawnRequest(
            ["python3", "-c", _INSPECT],
            cwd=Path(view.root),
            env={"PATH": "/usr/bin:/bin", "TMPDIR": view.tmp},
            stdout_path=tmp_path / "out",
            stderr_path=tmp_path / "err",
            timeout=60,
            kill_grace=1,
            containment=viewing,
            view=view,
        )
    )
    assert outcome.exit_code == 0, (tmp_path / "err").read_text()
    report = json.loads((tmp_path / "out").read_text())
    # Under userns the action is root only inside its user namespace: no mknod.
    # A root action of a pidns view holds no CAP_MKNOD (_capabilities.py):
    # its mknod fails before nodev is tried; build_view's own test below
    # makes the nodes with lre's full root.
    _check(report, root=False)


@pytest.mark.parametrize("template", [True, False], ids=["template", "per-action"])
def test_both_ways_of_making_the_tree_give_the_same_dev(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, template: bool
) -> None:
    """The template (cloned per action) and the tree built per action (where
    the kernel cannot attach into a detached tree) show the same /dev; the
    template is what this kernel uses from Linux 6.15 on."""
    if os.geteuid() != 0:
        pytest.skip("build_view in this process needs CAP_SYS_ADMIN (root; CI runs as root)")
    tree = DevTree(template=template)
    monkeypatch.setattr(_view_dev, "_PROCESS_TREE", tree)

    def inspect(view: ActionView) -> object:
        os.chdir(view.root)  # this thread's own (CLONE_FS)
        out = io.StringIO()
        source = _INSPECT.replace('os.environ["TMPDIR"]', repr(view.tmp))
        with contextlib.redirect_stdout(out):
            exec(compile(source, "inspect", "exec"), {})
        return json.loads(out.getvalue())

    for n in range(2):  # the second view: the template is reused
        (tmp_path / str(n)).mkdir()
        view = _scratch_view(tmp_path / str(n))
        report = in_view(view, lambda: inspect(view))  # noqa: B023 (called at once)
        assert isinstance(report, dict)
        _check(report, root=True)
    release = tuple(int(part) for part in os.uname().release.split(".")[:2] if part.isdigit())
    expected = "template" if template and release >= (6, 15) else "per-action"
    assert tree.mode == expected


def test_a_failing_clone_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """A template descriptor that is no mount fails the view with an
    ``OSError`` naming the call."""
    tree = DevTree()
    monkeypatch.setattr(tree, "_mode", "template")
    monkeypatch.setattr(tree, "_template", 10**6)
    with pytest.raises(OSError, match=r"open_tree /dev \(template\)") as raised:
        tree.mount()
    assert raised.value.errno == errno.EBADF
