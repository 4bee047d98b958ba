"""Name the calling thread as the kernel shows it (``/proc/<pid>/task/<tid>/comm``).

Python 3.11 keeps ``threading.Thread.name`` to itself, so ``top -H``, ``ps -L``
and bench/bench_capacity.py would see every thread lre starts under the
name of the thread that started it. Trio names its worker threads itself.
"""

from __future__ import annotations

import threading

#: The kernel keeps 15 bytes of a thread name.
_LIMIT = 15


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` (cut to 15 bytes) in the kernel.

    Best effort: on a system without ``/proc`` (or a read-only one) the
    thread keeps its old name and nothing is raised.
    """
    path = f"/proc/self/task/{threading.get_native_id()}/comm"
    try:
        with open(path, "wb") as comm:
            comm.write(name.encode("ascii", "replace")[:_LIMIT])
    except OSError:
        pass
