"""The per-action work a view skips, and why skipping it is still right.

``build_view`` masks each hidden path with one call whatever it is (the
tmpfs's own mount tells a directory from the rest; ``stat`` runs only
after a refusal, to give a file ``/dev/null``).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lre.worker.view._view import ActionView
from tests._support.view_thread import in_view


def test_each_hidden_path_is_masked_by_what_it_is(var_tmp: Path) -> None:
    """As ``os.path.isdir``/``isfile`` would say (symlinks followed): a
    directory shows an empty read-only tmpfs, a file (or a symlink to one)
    ``/dev/null``; a FIFO, a dangling symlink and a missing path get no
    mask, and the view is still built."""
    if os.geteuid() != 0:
        pytest.skip("build_view in this process needs CAP_SYS_ADMIN (root; CI runs as root)")
    hidden = var_tmp / "hidden"
    hidden.mkdir()
    (hidden / "dir").mkdir()
    (hidden / "dir" / "secret").write_text("s\n")
    (hidden / "file").write_text("token\n")
    (hidden / "to-dir").symlink_to(hidden / "dir")
    (hidden / "to-file").symlink_to(hidden / "file")
    (hidden / "dangling").symlink_to(hidden / "nowhere")
    os.mkfifo(hidden / "fifo")
    names = ("dir", "file", "to-dir", "to-file", "dangling", "fifo", "missing")
    action = var_tmp / "a1"
    for part in ("root", "tmp", "view/upper", "view/work"):
        (action / part).mkdir(parents=True)
    view = ActionView(
        root=str(action / "root"),
        upper=str(action / "view/upper"),
        work=str(action / "view/work"),
        tmp=str(action / "tmp"),
        xattrs="trusted",
        hidden=tuple(str(hidden / name) for name in names),
    )

    def inspect() -> dict[str, object]:
        seen: dict[str, object] = {}
        for name in names:
            path = hidden / name
            if not os.path.lexists(path):
                seen[name] = "missing"
            elif path.is_dir():
                seen[name] = ("directory", os.listdir(path), os.access(path, os.W_OK))
            elif path.exists() and stat.S_ISCHR(os.stat(path).st_mode):
                seen[name] = ("device", path.read_bytes())
            else:
                seen[name] = "as it is"
        return seen

    seen = in_view(view, inspect)
    # The mask of "dir" shows through the symlink too: "to-dir" leads there.
    assert seen == {
        "dir": ("directory", [], False),
        "to-dir": ("directory", [], False),
        "file": ("device", b""),
        "to-file": ("device", b""),
        "dangling": "as it is",
        "fifo": "as it is",
        "missing": "missing",
    }


@pytest.fixture
def var_tmp() -> Iterator[Path]:
    """A scratch directory outside ``/tmp``, which the view covers."""
    path = Path(tempfile.mkdtemp(prefix="lre-view-test-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path)
