"""Worker health and upstream reachability reach the event log and /status."""

from __future__ import annotations

from pathlib import Path

import trio

from lre.app import Application
from lre.digest import Digest
from lre.scheduler import SchedulerEvent
from lre.snapshot import EventKind
from tests._support.configs import app_config_text, config_of
from tests._support.servers import free_port


def _app(tmp_path: Path, extra_store: str = "") -> Application:
    stores = [extra_store] if extra_store else []
    return Application(config_of(app_config_text(tmp_path, extra_stores=stores)))


def test_worker_health_events_mark_and_clear_a_health_problem(tmp_path: Path) -> None:
    app = _app(tmp_path)
    sick = SchedulerEvent(
        EventKind.WORKER,
        "worker local: 3 actions in a row failed",
        worker="local",
        healthy=False,
    )
    app._record_event(sick)
    assert app.health.problems() == ("worker:local: worker local: 3 actions in a row failed",)
    assert not app.assembler().healthy
    app._record_event(
        SchedulerEvent(
            EventKind.WORKER, "worker local: running again", worker="local", healthy=True
        )
    )
    assert app.health.problems() == ()
    assert app.events.totals()["worker"] == 2


async def test_an_unreachable_upstream_store_is_an_upstream_event(tmp_path: Path) -> None:
    address = f"grpc://127.0.0.1:{free_port()}"
    store = (
        f'{{ name: "up", grpc: {{ endpoints: [{{ address: "{address}" }}], '
        "retry: { max_retries: 0, delay: 0.01, max_delay: 0.02 } } }"
    )
    app = _app(tmp_path, store)
    (upstream,) = app.stores.upstreams
    with trio.fail_after(30):
        try:
            await upstream.has_many([Digest("a" * 64, 1)])
        except Exception:
            pass  # the caller's failure is not the point: the event is
    events = [e for e in app.events.recent() if e.kind is EventKind.UPSTREAM]
    assert len(events) == 1
    assert events[0].message.startswith(f"upstream up ({address}) is unreachable (")
    # Coming back is an event too (the circuit breaker's own transition).
    upstream.client.health.record_success()
    newest = app.events.recent(1)[0]
    assert newest.kind is EventKind.UPSTREAM
    assert newest.message == f"upstream up ({address}) is reachable again"
    await upstream.aclose()
