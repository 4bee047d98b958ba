"""Building an action's view in a throwaway thread, to look at it from inside.

``in_view`` gives a fresh thread its own filesystem attributes and mount
namespace, builds the view there with lre's own ``build_view`` and runs the
test's check in it; the thread then ends, and its namespace with it, so the
test's own mounts never change. Needs root (CAP_SYS_ADMIN).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from lre.worker.containment._containment_base import CLONE_FS
from lre.worker.containment._syscalls import call
from lre.worker.view._view import ActionView, build_view

T = TypeVar("T")

_CLONE_NEWNS = 0x00020000


def in_view(view: ActionView, inspect: Callable[[], T]) -> T:
    """``inspect()`` run inside ``view``; what it raises (or what building the
    view raised) is raised again in the caller's thread."""
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            call("unshare", CLONE_FS)
            call("unshare", _CLONE_NEWNS)
            build_view(view)
            result.append(inspect())
        except BaseException as error:  # re-raised in the caller's thread
            failure.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]
