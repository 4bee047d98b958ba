"""Views for actions of an unprivileged lre: a helper inside a user namespace.

A process without privileges may mount only inside a user namespace of its
own, and lre, being multi-threaded, cannot enter one. So the ``userns``
backend starts one helper per lre, ``unshare --user --map-root-user --mount
--net python3 <this file>``: a single-threaded Python process holding every
capability inside that namespace (and none outside it). Its network
namespace, with its loopback up, is the one every action of the backend
runs in (``_action_network``: lre's listeners are not there); lre attaches
``slirp4netns`` to it for outside addresses. For each action
lre asks it, over its stdin/stdout, to build the action's view
(``_view.build_view``) in a new mount namespace; the helper keeps that
namespace open as a descriptor and answers its number ``N``. The action
then starts as ``nsenter --user=/proc/H/ns/user --mount=/proc/H/fd/N
--net=/proc/H/ns/net --preserve-credentials -- unshare --user
--map-user=<uid> ...``: the inner user namespace locks every mount of the
view (its processes cannot unmount a mask or make a read-only mount
writable) and drops the capabilities the outer one gave. lre tells the
helper to let a descriptor go as soon as that action ended, so the view's
tmpfs pages are freed then, not at the next action's start.

The helper imports ``_view.py``, ``_mount_api.py``, ``_view_dev.py`` and
``_view_writable.py``
by their file names
and nothing else of lre (so it needs only the standard library). It exits
when its stdin closes, so it never outlives lre. Protocol: one JSON object per line each way;
``{"build": {...ActionView fields}}`` -> ``{"fd": N}``, ``{"refused":
{"path": ..., "reason": ...}}`` (a writable path refused where it is
mounted, ``_view_writable``) or ``{"error": "message"}``; ``{"layers":
{"count": K, "bytes": B}}`` -> ``{"layers": [M,
...]}`` (``_view.make_layers``, each held by the helper, whose views name
them, until released) or ``{"error": "message"}``; ``{"release": [N,
...]}`` gets no answer.
"""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import fcntl
import importlib.util
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

_CLONE_NEWNS = 0x00020000


class ViewHelper:
    """lre's side of the helper (see the module docstring); thread-safe.

    Raises ``OSError`` from ``start`` when no interpreter can run the helper
    inside a user namespace, and from ``build`` when a view cannot be made
    (the message is the helper's).
    """

    def __init__(self, unshare: str, nsenter: str) -> None:
        self._unshare = unshare
        self._nsenter = nsenter
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        """Start the helper with the first interpreter that works in a user
        namespace (this one, else ``python3`` on PATH: an interpreter under a
        directory closed to the namespace's unmapped owner cannot)."""
        failures: list[str] = []
        candidates = [sys.executable, shutil.which("python3") or ""]
        for python in dict.fromkeys(c for c in candidates if c):
            argv = [self._unshare, "--user", "--map-root-user", "--mount", "--net", "--"]
            process = subprocess.Popen(
                [*argv, python, os.path.abspath(__file__)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                close_fds=True,
            )
            assert process.stdin is not None and process.stdout is not None
            try:
                process.stdin.write(json.dumps({"echo": True}) + "\n")
                process.stdin.flush()
                answer = process.stdout.readline()
            except OSError as error:
                answer = ""
                failures.append(str(error))
            if answer.strip() == '{"ready": true}':
                self._process = process
                atexit.register(self.close)
                return
            process.kill()
            _, err = process.communicate()
            failures.append(f"{python}: {err.strip()[-300:] or 'no answer'}")
        raise OSError(f"no view helper could start: {'; '.join(failures)}")

    def close(self) -> None:
        """Close the helper's stdin (it exits, dropping every view it still
        holds) and reap it; waits at most 5 s, then kills it. Runs at
        interpreter exit too, so no helper is left unreaped."""
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        # Imported here: the helper runs this file without lre, and never closes.
        from lre.hop import reap

        atexit.unregister(self.close)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        reap(process)

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def build(self, view: object) -> int:
        """Have the helper make ``view`` (an ``ActionView``); the number of
        the descriptor holding its mount namespace in the helper."""
        # Shallow: every field is a string, a number or tuples of them
        # (``asdict`` would deep-copy each tuple, a cost on every action).
        names = [field.name for field in dataclasses.fields(view)]  # type: ignore[arg-type]
        fields = {name: getattr(view, name) for name in names}
        answer = self._ask({"build": fields})
        refused = answer.get("refused")
        if refused is not None:
            # Imported here: run as the helper, this file sees no ``lre``.
            from lre.worker.view._view_writable import WritableRefused

            raise WritableRefused(str(refused["path"]), str(refused["reason"]))
        if "fd" not in answer:
            raise OSError(f"view helper: {answer.get('error', answer)}")
        return int(answer["fd"])

    def layers(self, count: int, size_bytes: int) -> list[int]:
        """Have the helper make ``count`` action tmpfs (``_view.make_layers``,
        inside its user namespace); the numbers of its descriptors of them
        (``/proc/<pid>/fd/<M>`` opens one from lre), each held until
        ``release``. Raises ``OSError`` with the helper's message."""
        request = {"layers": {"count": count, "bytes": size_bytes}}
        answer = self._ask(request)
        if "layers" not in answer:
            raise OSError(f"view helper: {answer.get('error', answer)}")
        return [int(fd) for fd in answer["layers"]]

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            process = self._process
            if process is None or process.stdin is None or process.stdout is None:
                raise OSError("the view helper is not running")
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        if not line:
            raise OSError("the view helper exited")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def release(self, *fds: int) -> None:
        """The action of view ``fd`` ended (or its tmpfs is dropped): the
        helper closes its descriptors now (the view's mounts, its tmpfs pages
        included, go with the last process in it and the last descriptor).
        A helper gone already holds nothing: ignored."""
        with self._lock:
            process = self._process
            if process is None or process.stdin is None:
                return
            try:
                process.stdin.write(json.dumps({"release": list(fds)}) + "\n")
                process.stdin.flush()
            except OSError:
                pass

    def enter(self, fd: int, cwd: str) -> list[str]:
        """The argv prefix that enters view ``fd`` and changes to ``cwd``
        there (entering a mount namespace moves to its root), then runs
        what follows."""
        proc = f"/proc/{self.pid}"
        return [
            self._nsenter,
            f"--user={proc}/ns/user",
            f"--mount={proc}/fd/{fd}",
            f"--net={proc}/ns/net",
            "--preserve-credentials",
            f"--wdns={cwd}",
            "--",
        ]

    def enter_network(self) -> list[str]:
        """The argv prefix that enters only the helper's user and network
        namespaces (an action without a view), then runs what follows."""
        proc = f"/proc/{self.pid}"
        return [
            self._nsenter,
            f"--user={proc}/ns/user",
            f"--net={proc}/ns/net",
            "--preserve-credentials",
            "--",
        ]

    def inner(self, uid: int, gid: int, *, view: bool = True) -> Sequence[str]:
        """The inner user namespace (locking the view's mounts, dropping the
        helper's capabilities) and the PID namespace, with its own /proc in
        a ``view``, as ``unshare`` options."""
        return (
            self._unshare,
            "--user",
            f"--map-user={uid}",
            f"--map-group={gid}",
            *("--pid", "--fork", "--kill-child", *(("--mount-proc",) if view else ()), "--"),
        )


def _load(file: str, name: str) -> object:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), file)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _load_view() -> object:
    """``_view.py`` and the modules it imports, ``_mount_api.py``, ``_view_dev.py`` and
    ``_view_writable.py``, by file name: registered under their package
    names, ``_view.py``'s ``from lre.worker._view_dev import ...`` finds
    them without importing ``lre``."""
    _load("_mount_api.py", "lre.worker.view._mount_api")
    _load("_view_dev.py", "lre.worker.view._view_dev")
    _load("_view_writable.py", "lre.worker.view._view_writable")
    return _load("_view.py", "_lre_view")


_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def _loopback_up() -> None:
    """Bring ``lo`` up in the helper's network namespace (slirp4netns does
    too, where it runs; without it this is all the actions have)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


#: ``ActionView`` fields holding marks (device, inode, path): JSON lists.
_MARK_FIELDS = ("hidden_marks", "within", "containing")


def _make_layers(view: Any, wanted: dict[str, Any]) -> dict[str, object]:
    """The answer to a ``layers`` request: the new descriptors, or the error
    (those already made are closed then)."""
    made: list[int] = []
    try:
        for _ in range(int(wanted["count"])):
            made.append(view.make_layers(int(wanted["bytes"])))
    except (OSError, TypeError, KeyError, ValueError) as error:
        for fd in made:
            os.close(fd)
        return {"error": f"make_layers: {error}"}
    return {"layers": made}


def main() -> None:
    """Serve build requests on stdin until it closes."""
    _loopback_up()
    view = _load_view()
    refusal: type[Any] = sys.modules["lre.worker.view._view_writable"].WritableRefused
    libc = ctypes.CDLL(None, use_errno=True)
    base = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    out = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("echo"):
            out.write(json.dumps({"ready": True}) + "\n")
            out.flush()
            continue
        for fd in request.get("release", ()):
            try:
                os.close(int(fd))
            except OSError:
                pass
        wanted = request.get("layers")
        if wanted is not None:
            out.write(json.dumps(_make_layers(view, wanted)) + "\n")
            out.flush()
            continue
        fields = request.get("build")
        if fields is None:
            continue
        try:
            if libc.unshare(_CLONE_NEWNS) != 0:
                code = ctypes.get_errno()
                raise OSError(code, f"unshare(CLONE_NEWNS): {os.strerror(code)}")
            try:
                fields["hidden"] = tuple(fields["hidden"])
                fields["writable"] = tuple(fields["writable"])
                fields["shown"] = tuple(fields["shown"])
                for name in _MARK_FIELDS:
                    fields[name] = tuple(tuple(mark) for mark in fields.get(name, ()))
                view.build_view(view.ActionView(**fields))  # type: ignore[attr-defined]
                fd = os.open("/proc/self/ns/mnt", os.O_RDONLY)  # inheritable: no O_CLOEXEC
            finally:
                if libc.setns(base, _CLONE_NEWNS) != 0:
                    code = ctypes.get_errno()
                    raise SystemExit(f"lre view helper: cannot return: {os.strerror(code)}")
            answer: dict[str, object] = {"fd": fd}
        except refusal as refused:
            answer = {"refused": {"path": refused.path, "reason": refused.reason}}
        except (OSError, TypeError, KeyError) as error:
            answer = {"error": str(error)}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
