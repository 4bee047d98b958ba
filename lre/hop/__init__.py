"""The hop between threads: grpc.aio's asyncio threads and the Trio thread.

``Mailbox`` is the one mechanism lre uses to cross between an asyncio
thread and the Trio thread, in both directions: the server-side bridge of
``lre.service`` and ``lre.upstream``'s ``UpstreamLoop`` post through
mailboxes. ``name_os_thread`` names a thread lre starts where the kernel
shows it (``top -H``, ``/proc``); the gRPC server, the upstream loop and the
worker's spawner threads call it. ``read_proc_stat`` / ``parse_proc_stat``
read a process's ``/proc/<pid>/stat`` line (``ProcStat``) for the worker and
the service alike.

Standard library only, at the bottom of the layers with ``snapshot``, so
every package may use it.
"""

from lre.hop._mailbox import Mailbox
from lre.hop._proc_stat import ProcStat, parse_proc_stat, read_proc_stat
from lre.hop._thread_name import name_os_thread

__all__ = ["Mailbox", "ProcStat", "name_os_thread", "parse_proc_stat", "read_proc_stat"]
