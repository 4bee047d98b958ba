"""The hop between threads: grpc.aio's asyncio threads and the Trio thread.

``Mailbox`` is the one mechanism lre uses to cross between an asyncio
thread and the Trio thread, in both directions: the server-side bridge of
``lre.service`` and ``lre.upstream``'s ``UpstreamLoop`` post through
mailboxes. ``name_os_thread`` names a thread lre starts where the kernel
shows it (``top -H``, ``/proc``); the gRPC server, the upstream loop and the
worker's spawner threads call it.

Standard library only, at the bottom of the layers with ``snapshot``, so
every package may use it.
"""

from lre.hop._mailbox import Mailbox
from lre.hop._thread_name import name_os_thread

__all__ = ["Mailbox", "name_os_thread"]
