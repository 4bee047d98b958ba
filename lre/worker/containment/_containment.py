"""Keeping everything an action starts inside the action's lifetime.

An action may start processes that leave its session and process group
(``setsid``, a double fork, a daemon). ``Containment`` is what makes sure
none of them outlives the action, nor lre. Three backends implement it:

``PidNamespace`` (``"pidns"``, the default where lre may create PID namespaces,
which on Linux means running with CAP_SYS_ADMIN, for example as root)
    Each action's first process is the first process (pid 1) of a PID
    namespace of its own. When it exits, the kernel SIGKILLs every other
    process of the namespace and reaps them *before* the first process is
    reported as exited, so by the time lre sees the action end nothing of it
    runs any more: its directory can be recycled and its outputs adopted
    without a race. The namespace is made by the spawner thread itself
    (``unshare(CLONE_NEWPID)`` just before the fork and ``setns`` back to
    lre's own namespace right after): it costs no extra process.

    In a view (``SpawnOptions.view``) the spawner thread also makes the
    action's mount namespace, and where the kernel can mount a procfs for a
    named PID namespace (Linux 6.15+) it mounts the action's ``/proc``
    itself, right after the fork: the first process is then POSIX ``sh``
    reading a gate on its stdin (a pipe lre holds); lre writes ``go`` once
    the mount is there, and closes the pipe without it when the mount failed
    (the gate then exits 125 and nothing of the action ran). After ``go``
    that sh stays pid 1 and runs the command as its child (stdin from
    ``/dev/null``, its own stderr kept out of the action's) and exits with
    its status: one exec fewer per action than executing ``timeout``.
    Elsewhere ``unshare --mount-proc`` (an extra exec and an extra mount
    namespace per action) mounts it before executing ``timeout``.

    Otherwise the first process is coreutils ``timeout 0`` (no time limit),
    which runs the command as its child, forwards SIGTERM to it and exits
    with its status (lre sends SIGTERM to the action's process group, which
    reaches the command under either first process). The command must not
    be pid 1 itself: pid 1 of a namespace does not receive signals it has no
    handler for from inside the namespace, so a script ending itself with
    ``kill -SEGV $$`` would exit 0, a wrong result. Being pid 1, neither
    first process can re-raise a signal that killed the command; each exits
    with 128 + the signal, which ``_process.py`` reports as that signal.
    If lre dies, the guardian (``_guardian.py``) SIGKILLs each namespace's
    first process, and the kernel the rest.

``UserNamespace`` (``"userns"``, Linux without privileges)
    The same, one PID namespace per action, made inside a user namespace by
    util-linux ``unshare`` in front of the command (see its docstring).

``ProcessGroupSweep`` (``"portable"``, what a machine without namespaces gets)
    The action runs in a session of its own; lre makes itself a child
    subreaper (Linux) so that processes orphaned by an action are re-parented
    to lre instead of init. When an action ends, its group is killed and lre's
    orphans (the children of its main thread: lre itself starts processes
    from other threads) are swept: an orphan born while this action ran and
    while no other running action did is killed; one that another running
    action may own is left to that action's end, and the directory of the
    action that ended is then not recycled, its outputs are copied rather than
    moved and its hardlinked inputs are discarded (``ended_alone`` is False).
    If lre dies, the guardian kills the listed groups, the orphans lre had
    found, and the descendants of both.

``choose_containment(mode)`` picks the strongest backend for ``"strongest"``, or
the one named, failing with a message that says why when it is unavailable.
Each backend has a module of its own (``_pid_namespace.py``,
``_user_namespace.py``, ``_group_sweep.py``); the contract they follow is in
``_containment_base.py``. This module is where the rest of lre imports them.
"""

from __future__ import annotations

import logging

from lre.worker.containment._containment_base import (
    Containment,
    ContainmentUnavailable,
    SpawnOptions,
    prepare_spawner_thread,
)
from lre.worker.containment._group_sweep import ProcessGroupSweep
from lre.worker.containment._pid_namespace import PidNamespace
from lre.worker.containment._protections import missing_protections, namespace_refusals
from lre.worker.containment._user_namespace import UserNamespace

__all__ = [
    "CONTAINMENT_MODES",
    "Containment",
    "ContainmentUnavailable",
    "PidNamespace",
    "ProcessGroupSweep",
    "SpawnOptions",
    "UserNamespace",
    "choose_containment",
    "prepare_spawner_thread",
]

log = logging.getLogger(__name__)

#: Values of ``worker.local.containment``.
CONTAINMENT_MODES = ("strongest", "strict", "pidns", "userns", "portable")


def choose_containment(mode: str) -> Containment:
    """The backend for ``mode`` (one of ``CONTAINMENT_MODES``).

    ``"strongest"`` takes the first of ``pidns``, ``userns`` and ``portable``
    that works here (logging why the others do not). ``"strict"`` is the same
    without ``portable``: where the kernel refuses both namespace backends it
    raises ``ContainmentUnavailable`` naming the missing protections and the
    kernel settings that refuse them (``_protections.py``). A named mode that
    cannot work raises ``ContainmentUnavailable``.
    """
    if mode not in CONTAINMENT_MODES:
        raise ValueError(f"containment: {mode!r} is not one of {', '.join(CONTAINMENT_MODES)}")
    candidates: list[type[Containment]] = [PidNamespace, UserNamespace]
    reasons: list[str] = []
    for backend in candidates:
        if mode not in ("strongest", "strict", backend.name):
            continue
        try:
            return backend()
        except ContainmentUnavailable as error:
            if mode == backend.name:
                raise
            reasons.append(f"{backend.name}: {error}")
            log.info("containment: %s unavailable (%s)", backend.name, error)
    if mode == "strict":
        raise ContainmentUnavailable(
            "'strict' needs a PID namespace per action and the kernel refuses both ways to "
            f"make one ({'; '.join(reasons)}); missing: "
            f"{'; '.join(missing_protections('portable'))}"
            + "".join(f"; {refusal}" for refusal in namespace_refusals())
        )
    return ProcessGroupSweep()
