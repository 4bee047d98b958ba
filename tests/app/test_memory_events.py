"""Freezes and thaws of the memory control reach the event log, named by
target and mnemonic (lre/app/_memory_events.py)."""

from __future__ import annotations

from pathlib import Path

import trio

from lre.app import Application
from lre.app._events import EventLog
from lre.app._memory_events import MemoryEventRecorder
from lre.cas import MemoryStore
from lre.config import SimpleSchedulerSpec
from lre.proto import re_pb2
from lre.scheduler import OperationSnapshot, RequestInfo, Scheduler
from lre.snapshot import EventKind, ProcessSnapshot
from lre.worker import MemoryAction, PressureMonitor
from tests._support.actions import build_action, put_action
from tests._support.configs import app_config_text, config_of
from tests.worker.test_memory_control import (
    GiB,
    MiB,
    argv,
    governed,
    processes_of,
    registered,
    running,
    stopped,
    until,
)
from tests.worker.test_worker import finish


async def _submit(
    scheduler: Scheduler, store: MemoryStore, arguments: list[str], target: str
) -> OperationSnapshot:
    digest = await put_action(store, build_action(arguments))
    request = re_pb2.ExecuteRequest(action_digest=digest.to_proto(), skip_cache_lookup=True)
    info = RequestInfo(action_mnemonic="Genrule", target_id=target)
    return scheduler.submit(request, request_info=info)


async def test_a_frozen_then_thawed_action_is_two_events_naming_target_rss_and_reason(
    tmp_path: Path,
) -> None:
    store = MemoryStore(1 << 30)
    available = [16 * GiB]
    pressure = PressureMonitor(2 * GiB, available=lambda: available[0], pressure=lambda: None)
    events = EventLog()
    stop_old, stop_new = tmp_path / "stop-old", tmp_path / "stop-new"
    old_marker, new_marker = f"old-{tmp_path.name}", f"new-{tmp_path.name}"
    async with running(store, tmp_path, governed(), pressure) as (scheduler, worker):
        worker.memory.on_event = MemoryEventRecorder(events, worker.name, scheduler.statistics)
        old = await _submit(scheduler, store, argv(old_marker, 0, stop_old), "//mem:idle")
        await until(lambda: registered(worker) == 1)  # the oldest, also to lre
        new = await _submit(scheduler, store, argv(new_marker, 400, stop_new), "//mem:grow")
        await until(lambda: processes_of(new_marker) and registered(worker) == 2)
        available[0] = int(1.5 * GiB)  # short: someone else took the memory
        await until(lambda: stopped(new_marker))
        await until(lambda: events.totals()["freeze"] == 1)
        await trio.sleep(0.2)
        available[0] = 16 * GiB
        await until(lambda: events.totals()["thaw"] == 1)
        stop_old.touch()
        stop_new.touch()
        await finish(scheduler, old.name)
        await finish(scheduler, new.name)
    thaw, freeze = events.recent()  # newest first
    for event in (freeze, thaw):
        assert (event.target, event.summary) == ("//mem:grow", "Genrule")
        assert event.worker == worker.name
        assert event.message.startswith("Genrule //mem:grow: ")
        assert " MiB RSS, reserving " in event.message
    assert freeze.kind is EventKind.FREEZE
    assert "frozen (SIGSTOP) at" in freeze.message or "frozen (cgroup freezer) at" in freeze.message
    assert "host MemAvailable 1536 MiB is under the headroom of 2048 MiB" in freeze.message
    assert thaw.kind is EventKind.THAW
    assert "memory freed: host MemAvailable 16384 MiB" in thaw.message
    # /api/v1/stats carries them as they are
    snapshot = ProcessSnapshot(0.0, 0.0, "", events=events.recent())
    again = ProcessSnapshot.from_json(snapshot.to_json())
    assert [e.kind for e in again.events] == [EventKind.THAW, EventKind.FREEZE]
    assert again.events[1].message == freeze.message


def test_the_apps_local_workers_tell_their_freezes_to_its_event_log(tmp_path: Path) -> None:
    app = Application(config_of(app_config_text(tmp_path)))
    assert app.workers
    for worker in app.workers:
        hook = worker.memory.on_event
        assert hook is not None
        hook(
            MemoryAction(
                "freeze",
                "lease-gone",
                700 * MiB,
                512 * MiB,
                "running actions use 9300 MiB of the 10240 MiB budget",
                "SIGSTOP",
            )
        )
        event = app.events.recent()[0]
        assert event.kind is EventKind.FREEZE and event.worker == worker.name
        assert event.message == (
            "lease lease-gone: frozen (SIGSTOP) at 700 MiB RSS, reserving 512 MiB: "
            "running actions use 9300 MiB of the 10240 MiB budget"
        )
    assert app.assembler().event_totals["freeze"] == len(app.workers)


def test_a_thaw_says_how_long_the_action_was_frozen() -> None:
    events = EventLog()
    idle = Scheduler(SimpleSchedulerSpec(), cas=MemoryStore(1 << 20))  # no lease: named by id
    recorder = MemoryEventRecorder(events, "local", idle.statistics)
    why = "the oldest running action always runs"
    recorder(MemoryAction("thaw", "l1", 3 * GiB, GiB, why, "SIGSTOP", 4.3))
    assert events.recent()[0].kind is EventKind.THAW
    assert events.recent()[0].message == (
        f"lease l1: thawed after 4.3 s frozen, at 3 GiB RSS, reserving 1 GiB: {why}"
    )
