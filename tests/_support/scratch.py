"""Where tests keep what an action must see, and the Python actions run.

An action's view covers ``/tmp`` with a tmpfs of its own, so a helper
program, a victim or a marker a test keeps under ``tmp_path`` (or in a
checkout under ``/tmp``) is not there for the action: an attack whose
helper never runs would pass without testing anything. ``shown_scratch``
gives a fresh directory under ``/var/tmp`` (which views show, read-only)
and removes it afterwards; ``action_python`` is a Python an action can
always run (the system's, not a virtualenv's that may live under ``/tmp``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["SHOWN_ROOT", "action_python", "action_pythonpath", "shown_scratch"]

#: A directory every view shows (the host read-only); /tmp is not one.
SHOWN_ROOT = "/var/tmp"


@contextmanager
def shown_scratch(identity: str = "own", prefix: str = "lre-test-") -> Iterator[Path]:
    """A fresh directory under ``SHOWN_ROOT``, owned by ``nobody`` when
    ``identity`` is ``"nobody"`` (mode 0755 either way, so an unprivileged
    action user can read what it holds), removed with all it holds after."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=SHOWN_ROOT))
    try:
        os.chmod(path, 0o755)
        if identity == "nobody":
            entry = pwd.getpwnam("nobody")
            os.chown(path, entry.pw_uid, entry.pw_gid)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def action_python() -> str:
    """The path of a Python 3 an action can run whatever the checkout's
    place: the system's ``/usr/bin/python3`` (or ``/bin/python3``). Fails
    the test when there is none."""
    for candidate in ("/usr/bin/python3", "/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    pytest.fail("actions need a system Python 3 (/usr/bin/python3)")


#: What an action-side script importing lre's protos and grpc needs, by
#: top-level name (packages and modules of the installed environment).
_ACTION_PACKAGES = ("grpc", "google", "typing_extensions.py")


def action_pythonpath(into: Path) -> str:
    """A ``PYTHONPATH`` under ``into`` (a ``shown_scratch``) from which an
    action's Python imports ``lre`` and ``grpc``: copies of this checkout's
    ``lre`` and of the installed packages it needs, since the checkout and
    its virtualenv may live where views show nothing (``/tmp``). Copies, not
    links: an attack that wrote through one would otherwise change the
    checkout. Raises ``OSError`` when they cannot be made."""
    import grpc

    site = Path(grpc.__file__).parents[1]
    root = Path(__file__).parents[2]
    target = into / "site-packages"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(root / "lre", target / "lre", ignore=skip)
    for name in _ACTION_PACKAGES:
        source = site / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=skip)
        else:
            shutil.copy2(source, target / name)
    return str(target)
