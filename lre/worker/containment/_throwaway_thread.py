"""Trying something that changes the calling thread (its namespaces, its
credentials) in a thread of its own, so that no thread of lre keeps the change."""

from __future__ import annotations

import threading
from collections.abc import Callable


def failure_in_throwaway_thread(name: str, attempt: Callable[[], None]) -> OSError | None:
    """Runs ``attempt`` in a new thread named ``name`` and waits for it to
    end; the ``OSError`` it raised, or None when it returned. Any other
    exception is the thread's own (printed, not raised here)."""
    failure: list[OSError] = []

    def run() -> None:
        try:
            attempt()
        except OSError as error:
            failure.append(error)

    thread = threading.Thread(target=run, name=name)
    thread.start()
    thread.join()
    return failure[0] if failure else None
