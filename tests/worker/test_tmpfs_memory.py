"""An action's private /tmp and /dev/shm, and what it writes into its input
root (the overlay's upper layer, on the same tmpfs): bounded together, and
counted as its memory (``_view.make_layers``, ``_view._mount_private_tmpfs``,
``_sampler``'s private tmpfs).

Written as the attacks: an action keeps what it allocates in tmpfs, where no
process's RSS shows it, and fills /tmp and /dev/shm each up to a bound of
its own. Through a real scheduler and worker (``memory_driver.py``) under
pidns as root and userns as ``nobody``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lre.snapshot import MEMORY_SAMPLED
from tests._support.lre_as import require_setup, run_driver, scratch_for

MiB = 1 << 20
DRIVER = Path(__file__).parents[1] / "_support" / "memory_driver.py"
SETUPS = (("pidns", "own"), ("userns", "nobody"))
IDS = [f"{c}-{i}" for c, i in SETUPS]

#: budget 256 MiB x kill_factor 1.2: actions above ~307 MiB are killed
BUDGET = 256 * MiB
CEILING = int(BUDGET * 1.2)


@pytest.fixture
def scratch(request: pytest.FixtureRequest) -> Iterator[Path]:
    with scratch_for(request.node.callspec.params["identity"]) as path:
        yield path


@pytest.mark.attack("memory: an action keeps 400 MiB in /dev/shm, past its hard ceiling")
@pytest.mark.parametrize(("containment", "identity"), SETUPS, ids=IDS)
def test_an_action_filling_dev_shm_is_killed_like_an_rss_hog(
    containment: str, identity: str, scratch: Path
) -> None:
    require_setup(containment, identity)
    hold = "sleep 30; echo still running"
    answer = run_driver(
        identity,
        {
            "mode": containment,
            "memory_budget": BUDGET,
            "ladder": [64 * MiB, 128 * MiB, BUDGET],
            # room for it all: the tmpfs's own bound is not what stops it
            "sandbox_tmpfs_size": 1 << 30,
            "commands": [
                [
                    "shm_hog",
                    "dd if=/dev/zero of=/dev/shm/hog bs=1M count=400 2>/dev/null "
                    f"&& echo wrote >&2; {hold}",
                ],
                ["rss_hog", "python3 -c \"b = b'x' * (400 << 20); import time; time.sleep(30)\""],
            ],
        },
        scratch,
        driver=DRIVER,
        timeout=300,
    )
    shm, rss = answer["shm_hog"], answer["rss_hog"]
    # the attack ran: a pass saw its tmpfs past the ceiling (dd itself
    # keeps ~2 MiB resident), and it was killed before its hold was over
    assert shm["peak"] > CEILING, shm
    assert shm["source"] == MEMORY_SAMPLED, shm
    assert shm["kills"] >= 1 and "still running" not in shm["stderr"], shm
    # ended as the RSS hog of the same size ends
    assert rss["kills"] >= 1, rss
    assert (shm["error"], shm["exit_code"]) == (rss["error"], rss["exit_code"]), (shm, rss)


@pytest.mark.attack("memory: an action fills /tmp and /dev/shm each up to its own bound")
@pytest.mark.parametrize(("containment", "identity"), SETUPS, ids=IDS)
def test_tmp_and_dev_shm_share_one_bound_and_count_as_memory(
    containment: str, identity: str, scratch: Path
) -> None:
    require_setup(containment, identity)
    answer = run_driver(
        identity,
        {
            "mode": containment,
            "sandbox_tmpfs_size": 64 * MiB,
            "commands": [
                [
                    "fill",
                    "dd if=/dev/zero of=/tmp/a bs=1M count=40 2>/dev/null && echo tmp-ok >&2; "
                    "dd if=/dev/zero of=/dev/shm/b bs=1M count=40 2>&1 >/dev/null "
                    "| grep -o 'No space left on device' >&2; "
                    "ls -a /tmp /dev/shm >&2; sleep 1",
                ],
            ],
        },
        scratch,
        driver=DRIVER,
        timeout=300,
    )
    fill = answer["fill"]
    assert "tmp-ok" in fill["stderr"], fill  # the attack ran
    # 40 MiB in /tmp leave 24 MiB for /dev/shm: the two share one 64 MiB bound
    assert "No space left on device" in fill["stderr"], fill
    # neither shows the other, nor the tmpfs's own root
    listed = fill["stderr"].split()
    assert "shm" not in listed and "tmp" not in listed, fill
    # what it kept there is its memory: a pass saw about 64 MiB
    assert fill["source"] == MEMORY_SAMPLED, fill
    assert fill["peak"] >= 60 * MiB, fill


@pytest.mark.attack("memory: an action keeps what it allocates as files in its input root")
@pytest.mark.parametrize(("containment", "identity"), SETUPS, ids=IDS)
def test_the_input_roots_writes_share_the_bound_and_count_as_memory(
    containment: str, identity: str, scratch: Path
) -> None:
    require_setup(containment, identity)
    answer = run_driver(
        identity,
        {
            "mode": containment,
            "sandbox_tmpfs_size": 64 * MiB,
            "commands": [
                [
                    "fill",
                    "dd if=/dev/zero of=kept bs=1M count=40 2>/dev/null && echo root-ok >&2; "
                    "dd if=/dev/zero of=/dev/shm/b bs=1M count=40 2>&1 >/dev/null "
                    "| grep -o 'No space left on device' >&2; sleep 1",
                ],
            ],
        },
        scratch,
        driver=DRIVER,
        timeout=300,
    )
    fill = answer["fill"]
    assert "root-ok" in fill["stderr"], fill  # the attack ran
    # 40 MiB in the input root leave 24 MiB for /dev/shm: one 64 MiB bound
    assert "No space left on device" in fill["stderr"], fill
    # what it kept there is its memory: a pass saw about 64 MiB
    assert fill["source"] == MEMORY_SAMPLED, fill
    assert fill["peak"] >= 60 * MiB, fill
