"""The edit loop's instant side (bench/_instant_executor.py) against a real lre:
an action lre already ran is answered from lre's action cache without a run,
one it never ran is forwarded and runs in lre."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _client import LreProcess, ReapiClient, local_config  # noqa: E402
from _instant_executor import InstantExecutor  # noqa: E402


def test_a_known_action_is_answered_from_the_cache_and_an_unknown_one_runs(
    tmp_path: Path,
) -> None:
    home = tmp_path / "lre"
    config = local_config(home, {"upload_action_result": {"ac_store": "ac"}})
    with LreProcess(config, home) as lre, InstantExecutor(lre.address) as instant:

        async def scenario() -> None:
            direct = ReapiClient(lre.address)
            via = ReapiClient(instant.address)
            try:
                # A command that takes a second: an answer in well under that
                # was not a run.
                slow = await direct.prepare(["sh", "-c", "sleep 1; echo ran"], do_not_cache=False)
                first = await direct.execute(slow)
                assert first.result.exit_code == 0
                started = time.monotonic()
                replayed = await via.execute(slow)
                assert time.monotonic() - started < 0.5
                assert replayed.result.stdout_digest == first.result.stdout_digest
                assert replayed.result.execution_metadata == first.result.execution_metadata
                assert (instant.served, instant.forwarded) == (1, 0)

                fresh = await direct.prepare(["sh", "-c", "echo fresh"], do_not_cache=False)
                ran = await via.execute(fresh)
                assert ran.result.exit_code == 0
                assert ran.result.stdout_digest.size_bytes == len(b"fresh\n")
                assert (instant.served, instant.forwarded) == (1, 1)
            finally:
                await direct.close()
                await via.close()

        asyncio.run(scenario())
