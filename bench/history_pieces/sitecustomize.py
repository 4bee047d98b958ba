"""CPU time of each piece of history recording inside a running lre server.

Not part of lre: ``bench_lre_ab.py --pieces`` puts this directory first on
the servers' ``PYTHONPATH``, so Python imports it at start-up in every lre
process it starts. It wraps the recording methods that exist in that tree
(the scheduler's tap, the recorder's queueing, absorbing, flushing and host
sampling, the lookup hook) with ``time.thread_time_ns`` (CPU time of the
calling thread, so other processes' load does not count) and writes the
totals, ``{piece: [nanoseconds, calls]}``, to ``$LRE_PIECES_OUT/<pid>.json``
at exit. The wrappers add ~1 us per call of their own.

Does nothing in a process that is not ``python -m lre`` or when
``LRE_PIECES_OUT`` is unset; a piece missing from a tree is skipped.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

_TOTALS: dict[str, list[int]] = {}

#: (module, class, method, piece name): the recording code of either shape
#: (before and after recording was batched once a second).
_PIECES = (
    ("lre.scheduler._history", "HistoryTap", "lease_ended", "tap.lease_ended (Trio)"),
    ("lre.scheduler._history", "HistoryTap", "finished", "tap.finished (Trio)"),
    ("lre.app._history", "HistoryRecorder", "record", "recorder.record"),
    ("lre.app._history", "HistoryRecorder", "record_later", "recorder.record_later (Trio)"),
    ("lre.app._history", "HistoryRecorder", "_absorb", "recorder._absorb"),
    ("lre.app._history", "HistoryRecorder", "flush", "recorder.flush (incl. absorb)"),
    ("lre.app._history", "HistoryRecorder", "_sample", "recorder._sample (per second)"),
    ("lre.service._lookup_hits", "LookupHits", "__call__", "lookup hit (gRPC)"),
)


def _timed(function: Callable[..., Any], piece: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time_ns()
        try:
            return function(*args, **kwargs)
        finally:
            total = _TOTALS.setdefault(piece, [0, 0])
            total[0] += time.thread_time_ns() - started
            total[1] += 1

    return wrapper


def _install(out: str) -> None:
    import importlib

    for module_name, class_name, method, piece in _PIECES:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        if method in vars(cls):
            setattr(cls, method, _timed(getattr(cls, method), piece))

    def write() -> None:
        with open(os.path.join(out, f"{os.getpid()}.json"), "w") as handle:
            json.dump(_TOTALS, handle)

    atexit.register(write)


_OUT = os.environ.get("LRE_PIECES_OUT")
if _OUT and sys.orig_argv[1:3] == ["-m", "lre"]:
    _install(_OUT)
