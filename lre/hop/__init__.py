"""The hop between threads: grpc.aio's asyncio threads and the Trio thread.

``Mailbox`` is the one mechanism lre uses to cross between an asyncio
thread and the Trio thread, in both directions: the server-side bridge of
``lre.service`` and ``lre.upstream``'s ``UpstreamLoop`` post through
mailboxes. ``name_os_thread`` names a thread lre starts where the kernel
shows it (``top -H``, ``/proc``); the gRPC server, the upstream loop and the
worker's spawner threads call it. ``read_proc_stat`` (a ``ProcStat``) and
``proc_stat_fields`` (its fields unconverted, indexed by ``StatField``) read
a process's ``/proc/<pid>/stat`` line for the worker and the service alike.
``reap`` waits for a helper process told to exit, and kills it if it lingers.

Standard library only, at the bottom of the layers with ``snapshot``, so
every package may use it.
"""

from lre.hop._mailbox import Mailbox
from lre.hop._proc_stat import ProcStat, StatField, proc_stat_fields, read_proc_stat
from lre.hop._reap import reap
from lre.hop._thread_name import name_os_thread

__all__ = [
    "Mailbox",
    "ProcStat",
    "StatField",
    "name_os_thread",
    "proc_stat_fields",
    "read_proc_stat",
    "reap",
]
