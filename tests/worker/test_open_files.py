"""Each action's own open-files limit (``workers[].local.max_open_files``).

Exact where lre sets it before anything of the action runs: ``pidns`` with a
view (its first process waits at the gate) and ``userns`` run by an
unprivileged lre (the ``prlimit`` inside the user namespace that also sets
``max_processes``). Elsewhere it lands on the first process right after the
fork, which its wrapper may beat (``_open_files``): not tested as exact.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from lre.cas import MemoryStore, read_bytes
from lre.digest import Digest
from lre.scheduler import Completed
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker.directories._workdir import WorkDirectory
from lre.worker.process._open_files import action_open_files
from tests._support.ci import in_ci

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
        runner = ActionRunner(RunnerContext(settings, workdir, store, containment=backend(name)))
        outcome = await runner.run(await make_lease(store, ["python3", "-c", _REPORT]))
    assert isinstance(outcome, Completed) and outcome.error is None, outcome
    assert outcome.result.exit_code == 0, outcome.result
    stdout = await read_bytes(store, Digest.from_proto(outcome.result.stdout_digest, field=""))
    return stdout.decode().strip()


async def test_an_action_gets_its_own_open_files_limit_and_cannot_raise_it(
    tmp_path: Path, store: MemoryStore
) -> None:
    assert await _limits_seen(tmp_path, store, "pidns", max_open_files=1000) == (
        "1000 1000 refused 1000"
    )


_RUN_AS_NOBODY = """
import sys, trio
from pathlib import Path
from lre.worker import choose_containment
from lre.worker.process import _process
from lre.worker.process._process import SpawnRequest, run_process

# The limit from the prlimit in the chain alone (the one lre sets on the
# first process after the fork may win a race with the wrapper, or not).
_process.limit_open_files = lambda pid, limit: None

async def main() -> None:
    work = Path(sys.argv[1])
    outcome = await run_process(SpawnRequest(
        ["/usr/bin/python3", "-c", sys.argv[2]],
        cwd=work, env={"PATH": "/usr/bin:/bin"},
        stdout_path=work / "stdout", stderr_path=work / "stderr",
        timeout=60, kill_grace=0.5, containment=choose_containment("userns"),
        max_processes=4096, max_open_files=1000,
    ))
    print(outcome.exit_code, (work / "stdout").read_text().strip())

trio.run(main)
"""


def test_an_unprivileged_lres_userns_actions_get_it_before_they_run() -> None:
    if os.geteuid() != 0:
        if in_ci():
            pytest.fail("CI runs as root; this test switches to nobody")
        pytest.skip("needs root to run as another user")
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    # Outside pytest's 0700 temporary directories, which nobody cannot enter.
    work = Path(tempfile.mkdtemp(prefix="lre-nofile-", dir="/var/tmp"))
    os.chown(work, 65534, 65534)
    try:
        ran = subprocess.run(
            [*as_nobody, sys.executable, "-c", _RUN_AS_NOBODY, str(work), _REPORT],
            capture_output=True,
            text=True,
            cwd="/",
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(Path(__file__).parents[2])},
            timeout=120,
            check=False,
        )
    finally:
        shutil.rmtree(work)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split("\n")[-2] == "0 1000 1000 refused 1000", ran.stdout


async def test_the_default_is_not_lres_own_limit(tmp_path: Path, store: MemoryStore) -> None:
    default = action_open_files(make_spec(tmp_path).max_open_files)
    # lre's own soft limit set apart from the default (whatever the hard
    # limit here), so that an action seeing the default proves it was set.
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(default - 1, 1024), limits[1]))
    try:
        seen = await _limits_seen(tmp_path, store, "pidns")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    assert seen == f"{default} {default} refused {default}"


async def test_zero_leaves_lres_own_limit(tmp_path: Path, store: MemoryStore) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    seen = await _limits_seen(tmp_path, store, "portable", max_open_files=0)
    assert seen.split()[:2] == [str(soft), str(hard)]


def test_more_than_the_hard_limit_gets_the_hard_limit_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from lre.worker.process import _open_files

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit to cap by")
    monkeypatch.setattr(_open_files, "_capped", [False])
    with caplog.at_level("WARNING", logger=_open_files.__name__):
        assert [action_open_files(hard + 1) for _ in range(3)] == [hard] * 3
        assert action_open_files(hard) == hard
    said = [r for r in caplog.records if "hard limit" in r.getMessage()]
    assert len(said) == 1 and str(hard + 1) in said[0].getMessage()
