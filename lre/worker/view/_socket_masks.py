"""Host paths whose Unix sockets views hide: servers that act for whoever connects.

A socket named by a path stays connectable on a read-only mount, and some
servers reachable that way run commands (or start containers, units, whole
sessions) for their caller, outside any view: a tmux or screen server, the
systemd managers (``systemd-run``), the D-Bus buses, container engines. An
action that can connect to one has left its view. ``socket_masks`` lists
the directories and files ``build_view`` covers in every view (an empty
read-only tmpfs over a directory, ``/dev/null`` over a socket); the paths
that do not exist when a view is built are skipped there.

``SHOWN_INSIDE`` are paths under those masks shown again (read-only):
``/run/systemd/resolve``, where ``/etc/resolv.conf`` points on hosts that
run systemd-resolved (name lookups would fail without it). A user hands one
more socket in with the worker's ``sandbox_visible_sockets`` (an ssh agent
for a fetch, say); ``ViewPolicy`` checks those.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

__all__ = ["SHOWN_INSIDE", "SOCKET_PATHS", "socket_masks"]

#: Covered in every view, where they exist (docs/security.md lists them).
SOCKET_PATHS: tuple[str, ...] = (
    # Per-user runtime directories: the systemd user manager, the session
    # bus, gpg and ssh agents, pipewire, podman's rootless socket, ...
    "/run/user",
    # systemd's own sockets (its private bus, io.systemd.*), D-Bus's system bus.
    "/run/systemd",
    "/run/dbus",
    "/var/run/dbus",
    # Container engines and machine managers.
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/docker",
    "/run/containerd",
    "/run/podman",
    "/run/crio",
    "/run/buildkit",
    "/run/k3s",
    "/run/lxd",
    "/var/lib/lxd/unix.socket",
    "/var/snap/lxd/common/lxd/unix.socket",
    "/run/incus",
    "/var/lib/incus/unix.socket",
    "/run/libvirt",
    "/run/snapd.socket",
    "/run/snapd-snap.socket",
    # Terminal multiplexers (tmux's default, /tmp/tmux-<uid>, is under the
    # view's own /tmp already).
    "/run/tmux",
    "/run/screen",
    "/var/run/screen",
)

#: Paths under ``SOCKET_PATHS`` shown again, read-only, where they exist.
SHOWN_INSIDE: tuple[str, ...] = ("/run/systemd/resolve",)

#: Variables of lre's environment naming more such directories themselves.
_FROM_ENVIRONMENT = ("XDG_RUNTIME_DIR", "SCREENDIR")


def _resolved(path: str) -> str:
    """``path`` with its symlinks resolved where it exists (``/var/run`` is
    ``/run`` on most hosts: one mask, not two), as given otherwise."""
    return os.path.realpath(path) if os.path.lexists(path) else os.path.normpath(path)


def socket_masks(environment: Mapping[str, str], uids: Iterable[int]) -> tuple[str, ...]:
    """``SOCKET_PATHS``, the directories ``environment`` (lre's own) names in
    ``$XDG_RUNTIME_DIR`` and ``$SCREENDIR``, and tmux's socket directory of
    each of ``uids`` under ``$TMUX_TMPDIR`` (``tmux-<uid>``), symlinks
    resolved, without repeats (order kept). A relative or empty value, or
    ``/``, is ignored; nothing here fails."""
    named = [environment.get(name, "") for name in _FROM_ENVIRONMENT]
    tmux = environment.get("TMUX_TMPDIR", "")
    if os.path.isabs(tmux):
        named.extend(os.path.join(tmux, f"tmux-{uid}") for uid in uids)
    chosen = (value for value in named if os.path.isabs(value) and value.strip("/"))
    paths = [*SOCKET_PATHS, *chosen]
    unique: dict[str, None] = {}
    for path in paths:
        unique.setdefault(_resolved(path), None)
    return tuple(unique)
