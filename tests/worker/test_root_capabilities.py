"""A root lre's actions in a view stay uid 0 with only ``ALLOWED``
(``lre/worker/containment/_capabilities.py``), while lre's other children keep root.

Real actions under ``pidns`` (root only; CI runs as root, so there they must run).
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from pathlib import Path

import pytest

from lre.cas import MemoryStore
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker.containment._capabilities import ALLOWED_MASK
from lre.worker.directories._workdir import WorkDirectory
from tests._support.ci import in_ci

from .conftest import make_lease, make_spec
from .test_action_identity import _stdout
from .test_containment import backend

_CAP_SYS_ADMIN = 21
_STATUS = "grep -E '^(Uid|CapInh|CapPrm|CapEff|CapBnd|CapAmb):' /proc/self/status"


@pytest.fixture(autouse=True)
def _root() -> None:
    if os.geteuid() != 0:
        if in_ci():
            pytest.fail("CI runs as root: pidns must lock root actions")
        pytest.skip("only a root lre runs root actions in a pidns view")


def _fields(out: str) -> dict[str, list[str]]:
    return {k: v.split() for k, v in (line.split(":", 1) for line in out.splitlines())}


async def _run(tmp_path: Path, store: MemoryStore, script: str, **spec: object) -> str:
    worker = make_spec(tmp_path, **spec)
    with WorkDirectory.open(worker.work_directory, worker.name) as workdir:
        runner = ActionRunner(RunnerContext(worker, workdir, store, containment=backend("pidns")))
        lease = await make_lease(store, ["/bin/sh", "-c", script])
        return await _stdout(store, await runner.run(lease))


async def test_a_root_action_holds_exactly_the_allowed_capabilities(
    tmp_path: Path, store: MemoryStore
) -> None:
    out = await _run(tmp_path, store, _STATUS)
    values = _fields(out)
    assert values["Uid"] == ["0"] * 4, out
    for key in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(values[key][0], 16) == ALLOWED_MASK, (key, out)
    # The bounding set stays lre's: nothing can be regained through it in a
    # view whose mounts are all nosuid (next test).
    assert int(values["CapBnd"][0], 16) & (1 << _CAP_SYS_ADMIN), out


async def test_a_file_capability_program_gains_nothing_in_the_view(
    tmp_path: Path, store: MemoryStore
) -> None:
    """A copy of grep whose file capabilities grant CAP_SYS_ADMIN (effective):
    the view's mounts are nosuid, so it runs with the ambient set only."""
    # Not below tmp_path: CI's lies in /tmp, which the view covers with a
    # fresh tmpfs, so the program would not be there at all.
    scratch = Path(tempfile.mkdtemp(prefix="lre-filecap-", dir="/var/tmp"))
    try:
        program = scratch / "grep-with-sys-admin"
        shutil.copy2(shutil.which("grep") or "/bin/grep", program)
        # struct vfs_cap_data, revision 2, effective bit set: permitted SYS_ADMIN.
        caps = struct.pack("<5I", 0x02000001, 1 << 21, 0, 0, 0)
        os.setxattr(program, "security.capability", caps)
        out = await _run(tmp_path, store, f"{program} -E '^Cap(Prm|Eff):' /proc/self/status")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    values = _fields(out)
    assert int(values["CapEff"][0], 16) == ALLOWED_MASK, out
    assert int(values["CapPrm"][0], 16) == ALLOWED_MASK, out


async def test_its_proc_is_read_only(tmp_path: Path, store: MemoryStore) -> None:
    out = await _run(
        tmp_path,
        store,
        "echo x > /proc/sys/kernel/domainname 2>/dev/null && echo wrote || echo refused; "
        "grep ' /proc ' /proc/self/mountinfo",
    )
    assert out.startswith("refused\n"), out
    assert " ro," in out.splitlines()[1], out


async def test_lres_other_children_keep_root(tmp_path: Path, store: MemoryStore) -> None:
    """Actions without a view, started by the same spawner threads right
    after root actions in views: SECBIT_NOROOT was cleared again."""
    for _ in range(4):
        await _run(tmp_path, store, "true")
    for _ in range(4):
        out = await _run(tmp_path / "plain", store, _STATUS, sandbox_view=False)
        assert int(_fields(out)["CapEff"][0], 16) & (1 << _CAP_SYS_ADMIN), out
