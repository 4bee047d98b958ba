"""``MissReport``: when the upstream action cache keeps missing, lre names the
environment keys and platform properties the missed actions carried."""

from __future__ import annotations

from lre.app._miss_report import MissReport, MissWatch
from lre.cas import FastSlowActionCache, MemoryActionCache, MemoryStore, write_blobs
from tests._support.actions import build_action


async def test_fifty_misses_in_a_row_name_the_keys_and_a_hit_clears_it() -> None:
    cas = MemoryStore(1 << 20)
    upstream = MemoryActionCache()
    cache = FastSlowActionCache(MemoryActionCache(), upstream)
    report = MissReport([MissWatch("upstream-ac", cache, cas)], threshold=50)
    actions = [
        build_action(
            ["gcc", "-c", f"m{i}.c"],
            env={"PATH": "/home/me/bin:/usr/bin", "LANG": "C.UTF-8"},
            action_platform={"OSFamily": "Linux", "cpu_count": "1"},
        )
        for i in range(50)
    ]
    for action in actions:
        await write_blobs(cas, list(action.blobs.items()))
    for action in actions[:49]:
        assert await cache.get(action.digest) is None
    await report.check()
    assert report.notices() == ()  # 49 is not yet "keep missing"
    assert await cache.get(actions[49].digest) is None
    await report.check()
    (notice,) = report.notices()
    assert "upstream action cache upstream-ac: the last 50 lookups all missed" in notice
    assert "environment keys [LANG, PATH]" in notice
    assert "platform properties [OSFamily=Linux, cpu_count=1]" in notice
    assert "--execution_log_json_file" in notice
    await report.check()
    assert report.notices() == (notice,)  # said once per streak
    hit = build_action(["true"])
    await upstream.put(hit.digest, b"result")
    assert await cache.get(hit.digest) == b"result"
    await report.check()
    assert report.notices() == ()


async def test_unreadable_actions_still_say_how_to_compare() -> None:
    cache = FastSlowActionCache(MemoryActionCache(), MemoryActionCache())
    report = MissReport([MissWatch("team", cache, MemoryStore(1 << 20))], threshold=2)
    for i in range(2):
        assert await cache.get(build_action(["x", str(i)]).digest) is None
    await report.check()
    (notice,) = report.notices()
    assert "could not be read from the CAS" in notice and "--execution_log_json_file" in notice


async def test_a_notice_made_before_the_actions_were_uploaded_names_their_keys_later() -> None:
    # Bazel asks GetActionResult before it uploads the Action and Command
    # (with Execute), so the first look may find none of them in the CAS.
    cas = MemoryStore(1 << 20)
    cache = FastSlowActionCache(MemoryActionCache(), MemoryActionCache())
    report = MissReport([MissWatch("team", cache, cas)], threshold=2)
    actions = [build_action(["cc", str(i)], env={"PATH": "/usr/bin"}) for i in range(2)]
    for action in actions:
        assert await cache.get(action.digest) is None
    await report.check()
    (first,) = report.notices()
    assert "could not be read from the CAS" in first
    for action in actions:
        await write_blobs(cas, list(action.blobs.items()))
    await report.check()
    (later,) = report.notices()
    assert "environment keys [PATH]" in later, later
