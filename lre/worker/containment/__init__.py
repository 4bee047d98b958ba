"""Keeping what an action starts inside its life: the backends (``_containment`` chooses
one of ``_pid_namespace``, ``_user_namespace``, ``_group_sweep``; their contract in
``_containment_base``), the watchdog for when lre dies (``_guardian``), the action's
network (``_action_network``), its identity and what it keeps of root (``_identity``,
``_capabilities``), the protections a backend lacks (``_protections``), the thin system
call wrappers they share (``_syscalls``) and the throwaway thread in which they try what
changes a thread's namespaces or credentials (``_throwaway_thread``).
"""

from lre.worker.containment._action_dns import FORWARDER, write_actions_resolv_conf
from lre.worker.containment._containment import choose_containment
from lre.worker.containment._containment_base import (
    WRAPPER_LABEL,
    ActionLaunch,
    Containment,
    ContainmentUnavailable,
    SpawnOptions,
    close_layers,
    layers_here,
    prepare_spawner_thread,
)
from lre.worker.containment._identity import ActionIdentity, resolve_action_user
from lre.worker.containment._protections import missing_protections, namespace_refusals

__all__ = [
    "FORWARDER",
    "WRAPPER_LABEL",
    "ActionIdentity",
    "ActionLaunch",
    "Containment",
    "ContainmentUnavailable",
    "SpawnOptions",
    "choose_containment",
    "close_layers",
    "layers_here",
    "missing_protections",
    "namespace_refusals",
    "prepare_spawner_thread",
    "resolve_action_user",
    "write_actions_resolv_conf",
]
