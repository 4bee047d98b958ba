"""The open-files limit (``RLIMIT_NOFILE``) of each action.

lre raises its own soft limit at start (``global.max_open_files``); an
action inheriting it could hold as many descriptors as lre itself (an action
once opened ~20,000 idle connections to lre's port and left lre none). Each
action's first process gets ``workers[].local.max_open_files`` as both its
soft and hard limit instead (``prlimit(2)`` from the spawner thread right
after the fork, never above lre's own hard limit); its processes inherit it
and may lower it but never raise it (that needs ``CAP_SYS_RESOURCE``, which
no action holds). Under ``pidns`` with a view the first process waits at its
gate until then, so the command starts limited; under ``userns`` run by an
unprivileged lre the ``prlimit`` placed in the user namespace for
``max_processes`` sets it too, before the command (``_process_limit``).
Elsewhere (``portable``, ``pidns`` without a view, ``userns`` run by root)
it lands on the first process, lre's wrapper (``timeout``, ``nsenter``),
while that starts: a process the wrapper forks before then keeps lre's
limit (an extra ``prlimit`` or shell in front of every action would cost
milliseconds each).

A process gone already (ESRCH) is left alone; any other refusal is logged
once per worker process and the action runs with lre's limit: nothing here
raises.
"""

from __future__ import annotations

import errno
import logging
import resource

__all__ = ["action_open_files", "limit_open_files"]

log = logging.getLogger(__name__)

_warned: list[bool] = [False]
#: Whether the cap by lre's hard limit was said (once per process).
_capped: list[bool] = [False]


def action_open_files(wanted: int) -> int:
    """The limit an action gets for a configured ``wanted`` (0: none, lre's
    own is inherited): ``wanted``, capped by lre's own hard limit (said once
    per process in the log, never raised)."""
    if wanted <= 0:
        return 0
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or wanted <= hard:
        return wanted
    if not _capped[0]:
        _capped[0] = True
        log.warning(
            "workers[].local.max_open_files: %d asked, but lre's hard limit is %d; actions "
            "get %d (raise it with ulimit -Hn, or LimitNOFILE= in a systemd unit)",
            wanted,
            hard,
            hard,
        )
    return hard


def limit_open_files(pid: int, limit: int) -> None:
    """Set ``pid``'s soft and hard ``RLIMIT_NOFILE`` to ``limit`` (0: leave
    it); see the module docstring for failures."""
    if limit <= 0:
        return
    try:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))
    except OSError as error:
        if error.errno == errno.ESRCH:
            return
        if not _warned[0]:
            _warned[0] = True
            log.warning(
                "workers[].local.max_open_files: cannot limit action %d to %d open files "
                "(%s); actions keep lre's own limit",
                pid,
                limit,
                error.strerror or error,
            )
