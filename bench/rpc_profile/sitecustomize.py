"""cProfile of every thread of a running lre server, one stats file per thread.

Not part of lre: ``bench_rpc_split.py --profile`` puts this directory first on
the server's ``PYTHONPATH``, so Python imports it at start-up. When
``LRE_PROFILE_OUT`` is set and the process is ``python -m lre``, the main
thread (the one that runs Trio) is profiled from here on, and every thread
started later (the gRPC asyncio thread, Trio's worker threads) from the start
of its ``run``. The clock is each thread's CPU time (``time.thread_time``),
so time spent waiting or preempted by other processes does not count. Each
thread's profile is written to ``$LRE_PROFILE_OUT/<thread name>-<ident>.prof``
when it ends (the main thread's at exit). Profiling multiplies the CPU of what it measures: read the
shares, not the absolute figures.
"""

from __future__ import annotations

import atexit
import cProfile
import os
import re
import sys
import threading
import time

_OUT = os.environ.get("LRE_PROFILE_OUT")


def _dump(profile: cProfile.Profile, name: str) -> None:
    profile.disable()
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    profile.dump_stats(f"{_OUT}/{safe}-{threading.get_ident()}.prof")


def _install() -> None:
    original_run = threading.Thread.run

    def profiled_run(self: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)
        profile.enable()
        try:
            original_run(self)
        finally:
            _dump(profile, self.name)

    threading.Thread.run = profiled_run  # type: ignore[method-assign]
    main = cProfile.Profile(time.thread_time)
    main.enable()
    atexit.register(_dump, main, "main")


if _OUT and sys.orig_argv[1:3] == ["-m", "lre"]:
    _install()
