"""A real lre scheduler and worker running shell commands, in a process of
its own (started through ``lre_as.run_driver``, so as lre's user or as
``nobody``), reporting the memory figure lre recorded for each.

argv[1] is a JSON request:

- ``mode``: the worker's containment; ``commands``: ``[[name, script], ...]``
  run one after the other as ``/bin/sh -c script`` in a view;
- optional ``memory_budget`` and ``sandbox_tmpfs_size`` (bytes) for the
  worker, and ``ladder`` (bytes per step);
- optional ``hide_peak_tool``: GNU time is looked up under a name no
  program has, as where it is not installed (``lre.worker.usage._tree_peak``).

The worker directory is ``./work``. Prints one JSON line: for each name, the
history record's ``peak`` (bytes), ``source`` (``memory_source``), ``kills``,
``error`` (a gRPC code name, "" for none), ``exit_code`` (None without a
result), the action's ``stderr`` tail and ``kernel``, the kernel's figure
of its run as the worker had it (``ProcessOutcome.kernel_peak_bytes``, 0:
none); plus ``lre_rss`` (this process's
resident bytes at the end: the image a first process carries).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import trio

from lre.cas import MemoryStore, read_bytes
from lre.config import ByteSize, Seconds, worker_resources
from lre.config._scheduler_models import SchedulerResourceSpec, SimpleSchedulerSpec
from lre.config._worker_models import JobserverSpec, LocalWorkerSpec, ResourceSpec
from lre.digest import Digest
from lre.proto import re_pb2
from lre.scheduler import RecordBuilder, Scheduler
from lre.snapshot import ActionRecord
from lre.worker import LocalWorker, PressureMonitor, _attempt
from lre.worker.memory._memory_figure import memory_figure
from lre.worker.process._process import ProcessOutcome
from lre.worker.usage import _tree_peak
from lre.worker.usage._sampler import ActionUsage
from tests._support.actions import build_action, put_action


def _spec(request: dict[str, Any], here: Path) -> LocalWorkerSpec:
    resources: dict[str, Any] = {}
    if "memory_budget" in request:
        resources["memory_budget"] = ByteSize(request["memory_budget"])
    extra: dict[str, Any] = {}
    if "sandbox_tmpfs_size" in request:
        extra["sandbox_tmpfs_size"] = ByteSize(request["sandbox_tmpfs_size"])
    return LocalWorkerSpec(
        name="w1",
        scheduler="main",
        cas_store="CAS",
        work_directory=str(here / "work"),
        kill_grace_s=Seconds(0.5),
        containment=request["mode"],
        sandbox_view=True,
        # make -j4 runs its four jobs as the reference does
        jobserver=JobserverSpec(enabled=False),
        resources=ResourceSpec(**resources),
        **extra,
    )


def _scheduler_resources(request: dict[str, Any]) -> SchedulerResourceSpec:
    """The ladder the worker's hard ceiling falls back on without a budget."""
    if "ladder" in request:
        return SchedulerResourceSpec(ladder=tuple(ByteSize(step) for step in request["ladder"]))
    return SchedulerResourceSpec()


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _watch_kernel_figures() -> list[int]:
    """The kernel's figure of each run, in the order runs end (the worker's
    ``memory_figure`` is wrapped to see its argument)."""
    seen: list[int] = []

    def watched(process: ProcessOutcome, sampled: ActionUsage | None) -> tuple[int, str]:
        seen.append(process.kernel_peak_bytes)
        return memory_figure(process, sampled)

    setattr(_attempt, "memory_figure", watched)  # noqa: B010 (not exported by _attempt)
    return seen


async def main(request: dict[str, Any]) -> None:
    here = Path.cwd()
    if request.get("hide_peak_tool"):
        _tree_peak.TOOL = "lre-test-no-such-time"
    kernel_figures = _watch_kernel_figures()
    store = MemoryStore(1 << 30)
    records: list[ActionRecord] = []
    recorded = [trio.Event()]

    def on_record(build: RecordBuilder) -> None:
        records.append(build())
        recorded[0].set()

    scheduler = Scheduler(SimpleSchedulerSpec(), cas=store, on_record=on_record)
    spec = _spec(request, here)
    answer: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        worker = LocalWorker(
            spec,
            resources=worker_resources(spec, scheduler=_scheduler_resources(request)),
            scheduler=scheduler,
            store=store,
            pressure=PressureMonitor(int(spec.resources.memory_headroom)),
        )
        await nursery.start(worker.run)
        for name, script in request["commands"]:
            built = build_action(
                ["/bin/sh", "-c", script], env={"PATH": "/usr/bin:/bin"}, salt=name.encode()
            )
            recorded[0] = trio.Event()
            del kernel_figures[:]
            digest = await put_action(store, built)
            execute = re_pb2.ExecuteRequest(action_digest=digest.to_proto(), skip_cache_lookup=True)
            op = scheduler.submit(execute)
            with trio.fail_after(120):
                async with scheduler.watch(op.name) as updates:
                    async for snapshot in updates:
                        if snapshot.done:
                            break
            with trio.fail_after(10):
                await recorded[0].wait()
            record = next(r for r in records if r.action == built.digest.hash)
            stderr = ""
            result = snapshot.result
            if result is not None and result.HasField("stderr_digest"):
                data = await read_bytes(store, Digest.from_proto(result.stderr_digest))
                stderr = data.decode(errors="replace")[-2000:]
            answer[name] = {
                "peak": record.peak_rss_bytes,
                "source": getattr(record, "memory_source", ""),  # none before the sources
                "kills": record.kills,
                "error": record.error,
                "exit_code": record.exit_code,
                "stderr": stderr,
                "kernel": kernel_figures[-1] if kernel_figures else 0,
            }
        answer["lre_rss"] = _rss()
        nursery.cancel_scope.cancel()
    print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    os.umask(0o022)
    trio.run(main, json.loads(sys.argv[1]))
