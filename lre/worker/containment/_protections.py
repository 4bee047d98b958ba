"""Which of lre's protections of an action a containment backend lacks, and why
the kernel refused the namespaces the stronger ones need.

lre reports both at start-up (a warning), in ``/status``
(``protections_missing``) and in ``lre doctor``; ``containment: "strict"``
refuses to start instead of running without them (``_containment.py``).

``namespace_refusals()`` reads the kernel settings that refuse unprivileged
namespaces (each named with its value and what to change); an unreadable or
absent setting is simply not reported.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PROTECTIONS", "missing_protections", "namespace_refusals"]

#: What each backend gives an action, in words ``/status`` and doctor show.
PROTECTIONS = {
    "pid-namespace": (
        "a PID namespace per action (every process it starts dies with it, by the kernel)"
    ),
    "network-namespace": "block-network (a network namespace of the action's own)",
    "listeners-unreachable": (
        "a network where lre's listeners do not exist (actions share lre's: only the "
        "listener guard refuses their calls, and the host's abstract sockets are reachable)"
    ),
}

#: Protections each backend has.
_HELD = {
    "pidns": ("pid-namespace", "network-namespace", "listeners-unreachable"),
    "userns": ("pid-namespace", "listeners-unreachable"),
    "portable": (),
}

#: Kernel settings that refuse unprivileged user namespaces: path, the value
#: that refuses, and what to do about it.
_SETTINGS = (
    (
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        "1",
        "AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+); allow them for "
        "lre with an AppArmor profile, or `sysctl kernel.apparmor_restrict_unprivileged_userns=0`",
    ),
    (
        "/proc/sys/kernel/unprivileged_userns_clone",
        "0",
        "the kernel refuses unprivileged user namespaces; "
        "`sysctl kernel.unprivileged_userns_clone=1`",
    ),
    (
        "/proc/sys/user/max_user_namespaces",
        "0",
        "no user namespace may be created; `sysctl user.max_user_namespaces=15000`",
    ),
)


def missing_protections(mode: str) -> tuple[str, ...]:
    """Descriptions of the protections backend ``mode`` (``pidns``, ``userns``,
    ``portable``) lacks; an unknown mode lacks all."""
    held = _HELD.get(mode, ())
    return tuple(text for key, text in PROTECTIONS.items() if key not in held)


def namespace_refusals(root: Path = Path("/")) -> tuple[str, ...]:
    """``setting = value: what it means and how to allow`` for each kernel
    setting under ``root`` that refuses unprivileged user namespaces."""
    found = []
    for path, refusing, advice in _SETTINGS:
        try:
            value = (root / path.lstrip("/")).read_text().strip()
        except OSError:
            continue
        if value == refusing:
            name = path.removeprefix("/proc/sys/").replace("/", ".")
            found.append(f"{name} = {value}: {advice}")
    return tuple(found)
