"""Each action's own open-files limit (``workers[].local.max_open_files``)."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from lre.cas import MemoryStore, read_bytes
from lre.digest import Digest
from lre.scheduler import Completed
from lre.worker._action import ActionRunner
from lre.worker._cas_handle import CasHandle
from lre.worker._open_files import action_open_files
from lre.worker._workdir import WorkDirectory

from .conftest import make_lease, make_spec
from .test_containment import backend

#: What the action reports: its limits, whether it could raise them, and
#: the limit a process it starts inherits.
_REPORT = """
import resource, subprocess
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard + 1000, hard + 1000))
    raised = "raised"
except (ValueError, OSError):
    raised = "refused"
child = subprocess.run(["sh", "-c", "ulimit -Hn"], capture_output=True, text=True).stdout
print(soft, hard, raised, child.strip())
"""


async def _limits_seen(tmp_path: Path, store: MemoryStore, name: str, **spec: object) -> str:
    settings = make_spec(tmp_path, **spec)
    with WorkDirectory.open(settings.work_directory, settings.name) as workdir:
        runner = ActionRunner(settings, workdir, CasHandle.of(store), containment=backend(name))
        outcome = await runner.run(await make_lease(store, ["python3", "-c", _REPORT]))
    assert isinstance(outcome, Completed) and outcome.error is None, outcome
    assert outcome.result.exit_code == 0, outcome.result
    stdout = await read_bytes(store, Digest.from_proto(outcome.result.stdout_digest, field=""))
    return stdout.decode().strip()


@pytest.mark.parametrize("name", ["pidns", "userns", "portable"])
async def test_an_action_gets_its_own_open_files_limit_and_cannot_raise_it(
    tmp_path: Path, store: MemoryStore, name: str
) -> None:
    assert await _limits_seen(tmp_path, store, name, max_open_files=1000) == (
        "1000 1000 refused 1000"
    )


async def test_the_default_is_not_lres_own_limit(tmp_path: Path, store: MemoryStore) -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    default = action_open_files(make_spec(tmp_path).max_open_files)
    assert default != soft  # else this test proves nothing here
    seen = await _limits_seen(tmp_path, store, "pidns")
    assert seen == f"{default} {default} refused {default}"


async def test_zero_leaves_lres_own_limit(tmp_path: Path, store: MemoryStore) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    seen = await _limits_seen(tmp_path, store, "portable", max_open_files=0)
    assert seen.split()[:2] == [str(soft), str(hard)]
