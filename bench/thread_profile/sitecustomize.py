"""cProfile of lre's own threads inside a running lre server, by thread kind.

Not part of lre: ``--profile`` of ``bench_small_actions.py`` puts this
directory first on the servers' ``PYTHONPATH``, so Python imports it at
start-up in every lre process it starts. In a process that is ``python -m lre`` with
``LRE_PROFILE_OUT`` set it profiles, each with its own ``cProfile.Profile``:

- ``trio``: the main thread (the Trio event loop), from its first action
  (the first ``prepare_command``) to exit;
- ``spawner``: every job the spawner threads run (``_Spawner``'s queue is
  wrapped, so only the jobs count, not the waits between them);
- ``batch``: each call of ``ActionDirectories._batch`` (the recycling
  thread), and ``collect``: each output scan run in a thread
  (``scan_outputs``);

and writes ``$LRE_PROFILE_OUT/<pid>-<kind>-<thread>.prof`` (``pstats`` format) at
exit. Times are the profiled thread's CPU time (``time.thread_time_ns``).
cProfile slows the profiled code several times over: the figures say
where a thread's time goes, compared between two servers of one run, not
what it costs unprofiled. A piece missing from a tree is skipped.
"""

from __future__ import annotations

import atexit
import cProfile
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_PROFILES: dict[str, cProfile.Profile] = {}
_LOCK = threading.Lock()


def _profile(kind: str) -> cProfile.Profile:
    """The calling thread's profile of ``kind`` (one per thread: each
    thread's CPU clock is its own)."""
    kind = f"{kind}-{threading.get_native_id()}"
    with _LOCK:
        profile = _PROFILES.get(kind)
        if profile is None:
            # CPU time of the calling thread, not wall time (waits are free).
            profile = _PROFILES[kind] = cProfile.Profile(time.thread_time_ns, 1e-9)
        return profile


def _profiled(function: Callable[..., Any], kind: str) -> Callable[..., Any]:
    """``function`` run under the calling thread's profile of ``kind``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        profile = _profile(kind)
        profile.enable()
        try:
            return function(*args, **kwargs)
        finally:
            profile.disable()

    return wrapper


class _ProfiledJobs:
    """A spawner's job queue whose jobs run under the ``spawner`` profile."""

    def __init__(self, jobs: Any) -> None:
        self._jobs = jobs

    def put(self, job: Callable[[], None]) -> None:
        self._jobs.put(_profiled(job, "spawner"))

    def get(self) -> Callable[[], None]:
        job: Callable[[], None] = self._jobs.get()
        return job


def _install(out: str) -> None:
    import importlib

    try:
        process = importlib.import_module("lre.worker.process._process")
        dirs = importlib.import_module("lre.worker.directories._action_dirs")
        collection = importlib.import_module("lre.worker.outputs._output_collection")
        action = importlib.import_module("lre.worker._attempt")
    except ImportError:
        return
    spawner_class = process._Spawner
    original_init = spawner_class.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self._jobs = _ProfiledJobs(self._jobs)

    spawner_class.__init__ = init
    for spawner in process._SPAWNERS.values():
        spawner._jobs = _ProfiledJobs(spawner._jobs)
    batch = dirs.ActionDirectories._batch
    dirs.ActionDirectories._batch = _profiled(batch, "batch")
    collection.scan_outputs = _profiled(collection.scan_outputs, "collect")
    main = _profile("trio")
    prepare = action.prepare_command
    started = []

    def first_action(*args: Any, **kwargs: Any) -> Any:
        if not started:
            started.append(True)
            main.enable()
        return prepare(*args, **kwargs)

    action.prepare_command = first_action

    def write() -> None:
        main.disable()
        for kind, profile in list(_PROFILES.items()):
            profile.dump_stats(os.path.join(out, f"{os.getpid()}-{kind}.prof"))

    atexit.register(write)


_OUT = os.environ.get("LRE_PROFILE_OUT")
if _OUT and sys.orig_argv[1:3] == ["-m", "lre"]:
    _install(_OUT)
