"""Running a small lre-side driver as lre's own user or as ``nobody``.

Attack tests run the attack from inside a real action; the "lre" that starts
the action is ``tests/_support/lre_driver.py`` in a subprocess, so that a test
can SIGKILL it, and so that it can run as an unprivileged user: ``nobody``
through ``setpriv`` (needs root; CI runs as root, so there it must work), with
the system's Python and this checkout's packages on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from tests._support.ci import in_ci
from tests._support.scratch import shown_scratch

#: Values of an attack test's ``identity`` parameter.
IDENTITIES = ("own", "nobody")

#: The (containment, identity) pairs an lre can run under, and so the only
#: ones an attack test generates. lre's own user gets every backend (pidns
#: where it holds CAP_SYS_ADMIN: root, as in CI); nobody lacks
#: CAP_SYS_ADMIN, so it gets userns and portable, never pidns.
SETUPS: tuple[tuple[str, str], ...] = (
    ("pidns", "own"),
    ("userns", "own"),
    ("portable", "own"),
    ("userns", "nobody"),
    ("portable", "nobody"),
)


def each_setup() -> pytest.MarkDecorator:
    """Parametrize a test's ``containment`` and ``identity`` over ``SETUPS``
    (ids like ``userns-nobody``); the test calls ``require_setup`` first."""
    return pytest.mark.parametrize(
        ("containment", "identity"), SETUPS, ids=[f"{c}-{i}" for c, i in SETUPS]
    )


def require_setup(containment: str, identity: str) -> None:
    """Fail a pair that is not one of ``SETUPS``; skip pidns where lre's own
    user is not root (a laptop; CI runs as root, so there this fails)."""
    assert (containment, identity) in SETUPS, f"{containment} as {identity} cannot exist"
    if containment == "pidns" and os.geteuid() != 0:
        if in_ci():
            pytest.fail("CI runs as root: pidns must be available")
        pytest.skip("pidns needs CAP_SYS_ADMIN (root)")


_ROOT = Path(__file__).parents[2]
DRIVER = Path(__file__).with_name("lre_driver.py")


def _site_packages() -> str:
    import grpc

    return str(Path(grpc.__file__).parents[1])


def python_for(identity: str) -> tuple[list[str], dict[str, str]]:
    """argv prefix and environment that run Python as ``identity``."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": f"{_ROOT}:{_site_packages()}",
        "LC_ALL": "C.UTF-8",
    }
    if identity == "own":
        return [sys.executable], env
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root; this test switches to nobody")
        pytest.skip("needs root to run as another user")
    system_python = shutil.which("python3", path="/usr/bin:/bin")
    if system_python is None:
        pytest.fail("no /usr/bin/python3 to run lre as nobody")
    setpriv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    return [*setpriv, system_python], env


def scratch_for(identity: str) -> AbstractContextManager[Path]:
    """A fresh directory ``identity`` may write (removed afterwards), where
    actions' views show it (``scratch.SHOWN_ROOT``: /tmp is their own)."""
    return shown_scratch(identity, prefix="lre-attack-")


def start_victim(identity: str) -> subprocess.Popen[bytes]:
    """A ``sleep`` running as ``identity`` outside any action (kill it after use)."""
    prefix, env = python_for(identity)
    return subprocess.Popen([*prefix[:-1], "sleep", "300"], env=env)


def start_driver(
    identity: str, request: dict[str, object], cwd: Path, *, driver: Path = DRIVER
) -> subprocess.Popen[str]:
    """Start ``driver`` (default lre_driver.py) as ``identity`` with ``request``."""
    prefix, env = python_for(identity)
    return subprocess.Popen(
        [*prefix, str(driver), json.dumps(request)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_driver(
    identity: str,
    request: dict[str, Any],
    cwd: Path,
    *,
    timeout: float = 120,
    driver: Path = DRIVER,
) -> dict[str, Any]:
    """Run ``driver`` (default lre_driver.py) to its end; its JSON answer
    (fails the test if it crashed or outlived ``timeout``)."""
    process = start_driver(identity, request, cwd, driver=driver)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"driver timed out: {err}")
    if process.returncode != 0:
        pytest.fail(f"driver failed ({process.returncode}): {err[-3000:]}")
    answer: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return answer


def refusing_namespaces(argv: list[str]) -> list[str]:
    """``argv`` run where the kernel really refuses both namespace backends:
    inside a user namespace whose ``user.max_user_namespaces`` is 0 (no nested
    user namespace: ENOSPC) with every capability dropped (no PID namespace:
    EPERM), as a distribution restricting unprivileged namespaces does."""
    setpriv = shutil.which("setpriv")
    unshare = shutil.which("unshare")
    if setpriv is None or unshare is None:
        pytest.fail("util-linux setpriv and unshare are needed")
    inner = " ".join(shlex.quote(a) for a in argv)
    return [
        *(unshare, "--user", "--map-root-user", "--", "/bin/sh", "-c"),
        "echo 0 > /proc/sys/user/max_user_namespaces && "
        f"exec {setpriv} --bounding-set=-all --inh-caps=-all {inner}",
    ]
