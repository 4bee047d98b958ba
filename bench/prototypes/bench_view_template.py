"""Prototype: an action's view copied from a per-thread template namespace.

A benchmark experiment, not a shipped path (nothing in ``lre/`` changes).
Today ``PidNamespace.spawn_context`` gives each action a copy of lre's own
mount namespace and ``build_view`` shapes all of it. Here each spawner
thread shapes, once, a *template* namespace with the part that is the same
for every action (the host read-only and slave, /proc, the /dev tree clone,
the stats of the hidden paths, /dev/null over hidden files, an empty
read-only tmpfs over every hidden directory, nosuid everywhere) and keeps it
open by a descriptor. Per action the thread then:

1. makes the overlay and the TMPDIR clone, detached, in lre's namespace;
2. ``setns`` into the template and ``unshare(CLONE_NEWNS)`` (its copy);
3. sets read-only and nosuid recursively on ``/`` again (one call: guards
   against host mounts that reached the template by propagation after it
   was made), mounts a devpts, fresh tmpfs on ``/tmp`` and ``/dev/shm``,
   and over each mask holding the action's root or tmp a writable tmpfs
   stacked on the template's one, its mount points, the overlay and tmp,
   and then makes that tmpfs read-only;
4. forks as today (gate, /proc, capabilities) and goes back to lre's
   namespace.

Modes, interleaved action by action, one action in flight, ``/bin/true``:
``none`` (no view), ``view`` (today's ``build_view``), ``template``.
Prints the median wall and lre CPU per action (``_spawn_bench.report``) and
each template's setup cost. The action directory lies in a "work root"
that is hidden; ``--hidden-outside N`` more hidden directories lie beside
it (CAS, state). ``--check`` runs a probe in the action instead of
``/bin/true`` and compares what the two view modes show. Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/, for _spawn_bench
from _spawn_bench import report, timed_run

from lre.worker import _view, _view_dev
from lre.worker._action_dirs import ActionDirectory, _empty_view
from lre.worker._containment_base import SpawnOptions
from lre.worker._pid_namespace import (
    _CLONE_NEWNS,
    _CLONE_NEWPID,
    PidNamespace,
    _open_namespace,
)
from lre.worker._process import run_process
from lre.worker._syscalls import call as _call
from lre.worker._view import ActionView, covered_by

_FRESH = ("/tmp", "/dev/shm")


@dataclass
class Template:
    """One spawner thread's template namespace."""

    fd: int
    #: hidden directories masked in the template (all of them)
    masks: list[str]
    setup_cpu_ms: float
    setup_wall_ms: float
    mountinfo: str


def _dev_tree_without_pts() -> None:
    """``mount_dev`` minus its devpts (that one is per action): a clone of
    the process's /dev template tree attached over /dev."""
    tree = _view_dev._PROCESS_TREE
    with tree._lock:
        if tree._mode is None:
            tree._choose()
        template = tree._template
    if template is None:
        raise NotImplementedError("this kernel gives no /dev template tree (before 6.15)")
    clone = tree._clone(template)
    try:
        _view_dev._attach(clone, _view_dev._AT_FDCWD, "/dev")
    finally:
        os.close(clone)


def make_template(view: ActionView, own_mnt_ns: int, *, host_proc_writable: bool) -> Template:
    """(spawner thread, in lre's namespace) Shape a new namespace with the
    part of ``view`` every action shares, keep it open, come back."""
    if view.writable:
        # They would have to go in the template before the masks and have
        # their read-only flag cleared again after the per-action setattr.
        raise NotImplementedError("writable paths are not prototyped")
    cpu, wall = time.thread_time(), time.perf_counter()
    _call("unshare", _CLONE_NEWNS)
    try:
        _view._setattr(
            "/", set_=_view._MOUNT_ATTR_RDONLY, propagation=_view._MS_SLAVE, recursive=True
        )
        if host_proc_writable:
            _view._setattr("/proc", clear=_view._MOUNT_ATTR_RDONLY)
        _dev_tree_without_pts()
        # Today the stats come after the fresh /tmp and /dev/shm: what lies
        # under them is hidden by them already.
        shown = tuple(path for path in view.hidden if covered_by(path, list(_FRESH)) is None)
        masks, files = _view._hidden_kinds(shown)
        for path in files:
            fd = _view._clone_tree("/dev/null")
            try:
                _view._attach(fd, path)
            finally:
                os.close(fd)
        for path in masks:
            _view._mount_tmpfs(
                path, _view._MASK_OPTIONS, _view._MS_NOSUID | _view._MS_NODEV | _view._MS_RDONLY
            )
        _view._setattr("/", set_=_view._MOUNT_ATTR_NOSUID, recursive=True)
        fd = os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        with open("/proc/thread-self/mountinfo") as handle:
            mountinfo = handle.read()
    finally:
        _call("setns", own_mnt_ns, _CLONE_NEWNS)
    return Template(
        fd,
        masks,
        (time.thread_time() - cpu) * 1000,
        (time.perf_counter() - wall) * 1000,
        mountinfo,
    )


def per_action(
    view: ActionView, template: Template, own: list[tuple[int, str]], *, host_proc_writable: bool
) -> None:
    """(spawner thread, in its fresh copy of the template) The part of the
    view that is the action's own; ``own``: its detached overlay and tmp."""
    _view._setattr("/", set_=_view._MOUNT_ATTR_RDONLY | _view._MOUNT_ATTR_NOSUID, recursive=True)
    if host_proc_writable:
        _view._setattr("/proc", clear=_view._MOUNT_ATTR_RDONLY)
    _view_dev._mount_pts()
    for path in _FRESH:
        _view._mount_tmpfs(path, _view.TMPFS_OPTIONS)
    later = [
        path
        for path in template.masks
        if covered_by(view.root, [path]) or covered_by(view.tmp, [path])
    ]
    for path in later:  # stacked over the template's read-only one
        _view._mount_tmpfs(path, _view._MASK_OPTIONS)
    for fd, path in own:
        _view._attach_at(fd, path, [*later, *_FRESH])
    for path in later:
        _view._setattr(path, set_=_view._MOUNT_ATTR_RDONLY)


class TemplatePidNamespace(PidNamespace):
    """``PidNamespace`` whose views come from a per-thread template when
    ``use_template`` (today's ``build_view`` otherwise)."""

    def __init__(self) -> None:
        self.use_template = False
        self._templates = threading.local()
        self.made: list[Template] = []
        #: the spawner thread of each template spawn (for --check)
        self.spawned_on: list[int] = []
        super().__init__()

    def _template_for(self, view: ActionView) -> Template:
        key = (view.hidden, self._gate_sh is None)
        cache: dict[object, Template] | None = getattr(self._templates, "cache", None)
        if cache is None:
            cache = self._templates.cache = {}
        template = cache.get(key)
        if template is None:
            template = make_template(
                view, self._own_mnt_ns, host_proc_writable=self._gate_sh is None
            )
            cache[key] = template
            self.made.append(template)
        return template

    @contextmanager
    def spawn_context(self, options: SpawnOptions) -> Iterator[list[str]]:
        if options.view is None or not self.use_template:
            with super().spawn_context(options) as prefix:
                yield prefix
            return
        view = options.view
        host_proc_writable = self._gate_sh is None
        self.spawned_on.append(threading.get_ident())
        # As PidNamespace.spawn_context, with build_view split in two.
        stale: int | None = getattr(self._gate, "view", None)
        if stale is not None:
            self._gate.view = None
            os.close(stale)
        _call("setns", self._own_pid_ns, _CLONE_NEWPID)
        _call("unshare", _CLONE_NEWPID)
        try:
            template = self._template_for(view)
            own: list[tuple[int, str]] = []
            try:
                # Paths resolved in lre's namespace, attached in the copy.
                own.append((_view.overlay_mount(view), view.root))
                own.append((_view._writable_clone(view.tmp), view.tmp))
                _call("setns", template.fd, _CLONE_NEWNS)
                try:
                    _call("unshare", _CLONE_NEWNS)
                    per_action(view, template, own, host_proc_writable=host_proc_writable)
                    for fd, _ in own:
                        os.close(fd)
                    own.clear()
                    held = _open_namespace() if options.hold_view else None
                    locked = options.drop_root_privileges and self._root_unlocked is None
                    try:
                        with (
                            self._gated(read_only_proc=locked),
                            self._network(options),
                            self._without_root(locked),
                        ):
                            yield []
                    except BaseException:
                        if held is not None:
                            os.close(held)
                        raise
                    self._gate.view = held
                finally:
                    _call("setns", self._own_mnt_ns, _CLONE_NEWNS)
            finally:
                for fd, _ in own:
                    os.close(fd)
        finally:
            _call("setns", self._own_pid_ns, _CLONE_NEWPID)


@dataclass
class Layout:
    base: Path
    action: Path
    view: ActionView
    outside: list[Path] = field(default_factory=list)
    token: Path | None = None
    shared: Path | None = None
    held: list[int] = field(default_factory=list)


def make_layout(where: str, outside: int, *, check: bool) -> Layout:
    """A scratch server tree: ``work/`` (hidden) holding the action directory
    and a sibling action's, ``cas<i>/`` hidden beside it (with a file each),
    and for ``--check`` a hidden token file and a visible ``shared`` dir."""
    base = Path(tempfile.mkdtemp(prefix="bench-tmpl-", dir=where))
    action = base / "work" / "a1"
    for name in ("root", "tmp", "view/upper", "view/work"):
        (action / name).mkdir(parents=True)
    (base / "work" / "a0").mkdir()
    (base / "work" / "a0" / "secret").write_text("other action\n")
    hidden = [str(base / "work")]
    dirs = []
    for index in range(outside):
        path = base / f"cas{index}"
        path.mkdir()
        (path / "blob").write_text("cas\n")
        hidden.append(str(path))
        dirs.append(path)
    token = None
    shared = None
    if check:
        token = base / "token"
        token.write_text("bearer\n")
        hidden.append(str(token))
        shared = base / "shared"
        shared.mkdir()
    view = ActionView(
        root=str(action / "root"),
        upper=str(action / "view/upper"),
        work=str(action / "view/work"),
        tmp=str(action / "tmp"),
        xattrs="trusted",
        hidden=tuple(hidden),
    )
    return Layout(base, action, view, dirs, token, shared)


def _recycled(action: Path) -> None:
    assert _empty_view(ActionDirectory.at(action), (os.geteuid(),)), "recycling failed"


# --- check mode -------------------------------------------------------------

#: Run by /usr/bin/python3 inside the action; argv[1]: JSON of the paths.
PROBE = r"""
import ctypes, json, os, sys
a = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def tries(fn):
    try:
        fn(); return "ok"
    except OSError as e:
        return e.strerror
def write(path):
    with open(path, "w") as f:
        f.write("x")
def walk(top):
    seen = []
    for d, dirs, files in os.walk(top):
        for n in sorted(dirs + files):
            seen.append(os.path.relpath(os.path.join(d, n), top))
    return sorted(seen)
out["write_usr"] = tries(lambda: write("/usr/lre-probe"))
out["write_slash"] = tries(lambda: write("/lre-probe"))
out["write_etc"] = tries(lambda: write("/etc/lre-probe"))
out["hidden_work"] = [p for p in walk(a["work"])]
out["hidden_outside"] = {p: os.listdir(p) for p in a["outside"]}
out["hidden_outside_write"] = {p: tries(lambda p=p: write(p + "/x")) for p in a["outside"]}
if a["token"]:
    st = os.stat(a["token"])
    out["token"] = [oct(st.st_mode >> 12), open(a["token"]).read()]
out["tmp_before"] = os.listdir("/tmp")
out["shm_before"] = os.listdir("/dev/shm")
out["tmp_write"] = tries(lambda: write("/tmp/mark"))
out["shm_write"] = tries(lambda: write("/dev/shm/mark"))
out["pts_before"] = sorted(os.listdir("/dev/pts"))
m, s = os.openpty()
out["pty"] = os.ttyname(s)
out["dev"] = sorted(os.listdir("/dev"))
out["root_write"] = tries(lambda: write(os.path.join(a["root"], "out")))
out["tmpdir_write"] = tries(lambda: write(os.path.join(a["tmp"], "t")))
out["root_listing"] = sorted(os.listdir(a["root"]))
out["tmpdir_listing"] = sorted(os.listdir(a["tmp"]))
out["pids"] = len([n for n in os.listdir("/proc") if n.isdigit()])
seen = ["/dev", "/tmp", "/dev/shm", "/dev/pts", a["work"], *a["outside"]]
out["st_dev"] = {p: os.stat(p).st_dev for p in seen}
if a["shared"]:
    late = os.path.join(a["shared"], "late")
    out["late_seen"] = os.path.ismount(late)
    out["late_write"] = tries(lambda: write(late + "/x")) if out["late_seen"] else None
target = (a["outside"] or [a["work"]])[0].encode()
if not a.get("plant"):  # (an unlocked root would succeed and uncover the host's)
    r = libc.umount2(target, 2)  # MNT_DETACH
    out["umount_mask"] = "ok" if r == 0 else os.strerror(ctypes.get_errno())
else:
    r = libc.mount(None, target, None, ctypes.c_ulong(0x20), None)  # MS_REMOUNT, rw
    out["remount_rw"] = "ok" if r == 0 else os.strerror(ctypes.get_errno())
    out["plant"] = tries(lambda: write(target.decode() + "/planted"))
out["planted_seen"] = os.path.exists(target.decode() + "/planted")
mounts = []
for line in open("/proc/self/mountinfo"):
    f = line.split()
    sep = f.index("-")
    mounts.append({"point": f[4], "opts": f[5], "tags": f[6:sep], "fs": f[sep + 1]})
out["mounts"] = mounts
print(json.dumps(out))
"""

#: What must match between the two view modes (st_dev and mounts differ).
COMPARED = (
    "write_usr", "write_slash", "write_etc", "hidden_work", "hidden_outside",
    "hidden_outside_write", "token", "tmp_before", "shm_before", "tmp_write", "shm_write",
    "pts_before", "pty", "dev", "root_write", "tmpdir_write", "root_listing",
    "tmpdir_listing", "pids", "late_seen", "late_write", "umount_mask", "planted_seen",
)  # fmt: skip


async def _probe(
    containment: TemplatePidNamespace, layout: Layout, template: bool, **extra: object
) -> dict[str, Any]:
    containment.use_template = template
    paths = {
        "work": str(layout.base / "work"),
        "outside": [str(p) for p in layout.outside],
        "token": str(layout.token) if layout.token else None,
        "shared": str(layout.shared) if layout.shared else None,
        "root": layout.view.root,
        "tmp": layout.view.tmp,
        **extra,
    }
    _recycled(layout.action)
    # Each view is held (its namespace kept open) until the check ends, so
    # that no superblock is freed and its device number reused meanwhile:
    # equal st_dev values then mean one filesystem.
    outcome = await run_process(
        ["/usr/bin/python3", "-c", PROBE, json.dumps(paths)],
        cwd=Path(layout.view.root),
        env={"PATH": "/usr/bin:/bin"},
        stdout_path=layout.action / "stdout",
        stderr_path=layout.action / "stderr",
        timeout=60,
        kill_grace=1,
        containment=containment,
        view=layout.view,
        on_view_held=layout.held.append,
    )
    assert outcome.exit_code == 0, (outcome, (layout.action / "stderr").read_text())
    result: dict[str, Any] = json.loads((layout.action / "stdout").read_text())
    return result


def _expect(failures: list[str], mode: str, name: str, ok: bool, got: object) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {mode:8s} {name}: {got}")
    if not ok:
        failures.append(f"{mode} {name}")


def _judge(failures: list[str], mode: str, out: dict[str, Any], layout: Layout) -> None:
    refused = ("Read-only file system",)
    for key in ("write_usr", "write_slash", "write_etc"):
        _expect(failures, mode, key, out[key] in refused, out[key])
    rel_root = os.path.relpath(layout.view.root, layout.base / "work")
    rel_tmp = os.path.relpath(layout.view.tmp, layout.base / "work")
    wanted = {"a1", rel_root, rel_tmp, f"{rel_root}/out", f"{rel_tmp}/t"}
    _expect(failures, mode, "work root shows only own root+tmp",
            set(out["hidden_work"]) <= wanted and "a0" not in str(out["hidden_work"]),
            out["hidden_work"])  # fmt: skip
    outside = out["hidden_outside"]
    assert isinstance(outside, dict)
    _expect(failures, mode, "outside hidden dirs empty", all(not v for v in outside.values()),
            outside)  # fmt: skip
    writes = out["hidden_outside_write"]
    assert isinstance(writes, dict)
    _expect(failures, mode, "outside masks read-only",
            all(v in refused for v in writes.values()), writes)  # fmt: skip
    _expect(failures, mode, "token is /dev/null", out["token"] == ["0o2", ""], out["token"])
    for key in ("tmp_before", "shm_before"):
        _expect(failures, mode, key + " empty", out[key] == [], out[key])
    for key in ("tmp_write", "shm_write", "root_write", "tmpdir_write"):
        _expect(failures, mode, key, out[key] == "ok", out[key])
    _expect(failures, mode, "fresh devpts", out["pts_before"] == ["ptmx"] and
            out["pty"] == "/dev/pts/0", (out["pts_before"], out["pty"]))  # fmt: skip
    _expect(failures, mode, "own /proc", out["pids"] <= 3, out["pids"])
    _expect(failures, mode, "late host mount seen read-only",
            out["late_seen"] is True and out["late_write"] in refused,
            (out["late_seen"], out["late_write"]))  # fmt: skip
    _expect(failures, mode, "umount of a mask refused", out["umount_mask"] != "ok",
            out["umount_mask"])  # fmt: skip
    mounts = out["mounts"]
    assert isinstance(mounts, list)
    shared = [m for m in mounts if any(t.startswith("shared:") for t in m["tags"])]
    _expect(failures, mode, "no shared: mount in the view", not shared, shared)


def _propagation(mounts: list[dict[str, Any]]) -> str:
    tags: dict[str, int] = {}
    for m in mounts:
        tag = ",".join(t.split(":")[0] for t in m["tags"]) or "private"
        tags[tag] = tags.get(tag, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(tags.items()))


def _host(argv: list[str], *, check: bool) -> None:
    """A mount command on lre's (the host's) namespace, for the check's
    shared mount (quick; the check has nothing else in flight)."""
    subprocess.run(argv, check=check)


async def _check(containment: TemplatePidNamespace, args: argparse.Namespace) -> None:
    layout = make_layout(args.dir, args.hidden_outside, check=True)
    assert layout.shared is not None
    failures: list[str] = []
    _host(["mount", "--bind", str(layout.shared), str(layout.shared)], check=True)
    late = layout.shared / "late"
    try:
        _host(["mount", "--make-shared", str(layout.shared)], check=True)
        late.mkdir()
        # Templates of both spawner threads, made before the late host mount.
        for _ in range(6):
            await _probe(containment, layout, True)
        _host(["mount", "-t", "tmpfs", "late", str(late)], check=True)
        runs: dict[str, list[dict[str, Any]]] = {"view": [], "template": []}
        for _ in range(2):  # two consecutive actions per mode, interleaved
            for mode in runs:
                runs[mode].append(await _probe(containment, layout, mode == "template"))
        for mode, outs in runs.items():
            print(f"{mode}:")
            for out in outs:
                _judge(failures, mode, out, layout)
            for key in ("/tmp", "/dev/shm", "/dev/pts", str(layout.base / "work")):
                devs = [o["st_dev"][key] for o in outs]
                _expect(failures, mode, f"{key} a new fs per action (st_dev)",
                        devs[0] != devs[1], devs)  # fmt: skip
            for path in ["/dev", *map(str, layout.outside)]:
                devs = [o["st_dev"][path] for o in outs]
                same = "shared superblock" if devs[0] == devs[1] else "own per action"
                print(f"  [info] {mode:8s} {path} st_dev {devs}: {same}")
            mounts = outs[0]["mounts"]
            assert isinstance(mounts, list)
            print(f"  [info] {mode:8s} {len(mounts)} mounts; propagation: {_propagation(mounts)}")
            for m in mounts:
                if m["tags"] or str(layout.base) in m["point"]:
                    print(f"      {m['point']} {m['opts']} {' '.join(m['tags'])} {m['fs']}")
        for key in COMPARED:
            a, b = runs["view"][0].get(key), runs["template"][0].get(key)
            _expect(failures, "both", f"same {key}", a == b, "" if a == b else (a, b))
        view_points = sorted(m["point"] for m in runs["view"][0]["mounts"])
        tmpl_points = sorted(m["point"] for m in runs["template"][0]["mounts"])
        extra = [p for p in set(tmpl_points) if tmpl_points.count(p) != view_points.count(p)]
        print(f"  [info] mount points whose count differs (template vs view): {extra}")
        for template in containment.made:
            print("  [info] template mountinfo propagation: " + _propagation(
                [{"tags": line.split()[6:line.split().index("-")]}
                 for line in template.mountinfo.splitlines()]))  # fmt: skip
        # A root action that keeps CAP_SYS_ADMIN (as where lre cannot lock
        # root actions) remounts a mask rw and writes: who sees it next?
        for mode in ("view", "template"):
            containment._root_unlocked = "bench: root keeps its capabilities"
            try:
                before = len(containment.spawned_on)
                planted = await _probe(containment, layout, mode == "template", plant=True)
            finally:
                containment._root_unlocked = None
            print(f"  [info] {mode:8s} unlocked root: remount rw {planted['remount_rw']}, "
                  f"write {planted['plant']}")  # fmt: skip
            thread = containment.spawned_on[before] if mode == "template" else None
            seen = None
            for _ in range(10):  # until one runs on the same spawner thread
                mark = len(containment.spawned_on)
                out = await _probe(containment, layout, mode == "template")
                if mode == "view" or containment.spawned_on[mark] == thread:
                    seen = out["planted_seen"]
                    break
            print(f"  [info] {mode:8s} next locked action (same thread) sees the plant: {seen}")
    finally:
        for fd in layout.held:
            os.close(fd)
        _host(["umount", "-l", str(late)], check=False)
        _host(["umount", "-l", str(layout.shared)], check=False)
        shutil.rmtree(layout.base, ignore_errors=True)
    _report_templates(containment)
    print("check:", "all passed" if not failures else f"FAILED {failures}")
    if failures:
        sys.exit(1)


# --- benchmark ---------------------------------------------------------------


def _report_templates(containment: TemplatePidNamespace) -> None:
    for index, template in enumerate(containment.made):
        lines = len(template.mountinfo.splitlines())
        print(
            f"template {index}: setup thread cpu {template.setup_cpu_ms:.2f} ms, "
            f"wall {template.setup_wall_ms:.2f} ms, masks {len(template.masks)}, "
            f"{lines} mounts"
        )


async def _bench(containment: TemplatePidNamespace, args: argparse.Namespace) -> None:
    layout = make_layout(args.dir, args.hidden_outside, check=False)
    modes = [("none", None, False), ("view", layout.view, False), ("template", layout.view, True)]
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name, *_ in modes}

    async def one(shown: ActionView | None, template: bool) -> tuple[float, float, float]:
        containment.use_template = template
        recycle = (lambda: _recycled(layout.action)) if shown is not None else None
        sample: tuple[float, float, float] = await timed_run(
            containment, layout.action, ["/bin/true"], before_start=recycle, view=shown
        )
        return sample

    try:
        # Warm-up, unrecorded: every spawner thread makes its template here.
        for _ in range(10):
            for _, shown, template in modes:
                await one(shown, template)
        made = len(containment.made)
        for _ in range(args.rounds):
            for _ in range(args.runs):  # the modes interleaved action by action
                for name, shown, template in modes:
                    results[name].append(await one(shown, template))
    finally:
        shutil.rmtree(layout.base, ignore_errors=True)
    print(f"# hidden dirs: 1 holding the action dir + {args.hidden_outside} outside")
    report(results)
    _report_templates(containment)
    print(f"# templates made during the measured runs: {len(containment.made) - made}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=30, help="actions per round and mode")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the tree goes")
    parser.add_argument("--hidden-outside", type=int, default=2)
    parser.add_argument("--check", action="store_true", help="probe the views, no timing")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (pidns containment)")
    containment = TemplatePidNamespace()
    if containment._gate_sh is None:
        print("# note: no sh gate (kernel without procfs pidns=): unshare mounts /proc")
    trio.run(_check if args.check else _bench, containment, args)


if __name__ == "__main__":
    main()
