"""Name lookups from the actions' network namespace.

An action reads the host's ``/etc/resolv.conf``. On a laptop that file often
names only a resolver on the host's loopback: systemd-resolved's stub
(127.0.0.53), dnsmasq (127.0.0.1), or nothing at all (the C library then
asks 127.0.0.1). None of those exists in the actions' namespace, whose
loopback is its own (``_action_network``), so every lookup would fail.

``slirp4netns``, which joins that namespace to outside addresses, answers
DNS on its own virtual address (``FORWARDER``, 10.0.2.3; port 53 only, UDP
and TCP) by passing each query to the first nameserver of the resolv.conf
*it* reads, the host's, loopback ones included. So where the host names
only loopback nameservers and the actions use that stack, their view shows
a resolv.conf of their own at ``/etc/resolv.conf`` (where the host's path
leads): the host's text with its nameservers replaced by ``FORWARDER``,
its ``search``, ``domain`` and ``options`` lines kept. A host naming an
outside nameserver is left alone (the stack reaches it like any address).
The text is taken once, when the worker starts.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from pathlib import Path

__all__ = ["FORWARDER", "HOST_RESOLV_CONF", "actions_resolv_conf", "write_actions_resolv_conf"]

log = logging.getLogger(__name__)

#: slirp4netns's built-in DNS forwarder (the network address + 3 of its
#: default 10.0.2.0/24).
FORWARDER = "10.0.2.3"
HOST_RESOLV_CONF = "/etc/resolv.conf"
#: The file a worker writes in its own work directory (hidden from actions;
#: the view binds it before the masks go on).
_NAME = "actions-resolv.conf"


def _loopback(address: str) -> bool:
    """Whether a nameserver address is on loopback (an unparsable one is
    not: the C library skips it as well)."""
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def actions_resolv_conf(host_text: str, forwarder: str = FORWARDER) -> str | None:
    """The resolv.conf actions should read instead of ``host_text``: None
    when a nameserver of the host's is reachable from their namespace (one
    not on loopback), else the host's text with every ``nameserver`` line
    replaced by one naming ``forwarder`` (no nameserver at all means
    127.0.0.1 to the C library, so that too is replaced)."""
    kept: list[str] = []
    servers: list[str] = []
    for line in host_text.splitlines():
        words = line.split()
        if words and words[0] == "nameserver":
            if len(words) > 1:
                servers.append(words[1])
            continue
        kept.append(line)
    if any(not _loopback(server) for server in servers):
        return None
    told = ", ".join(servers) or "none (so 127.0.0.1)"
    header = (
        f"# Written by lre for its actions: the host's nameservers ({told}) are on\n"
        f"# its loopback, which actions cannot reach; {forwarder} forwards to them.\n"
    )
    return header + f"nameserver {forwarder}\n" + "".join(f"{line}\n" for line in kept)


def write_actions_resolv_conf(
    directory: Path, host: str = HOST_RESOLV_CONF, forwarder: str = FORWARDER
) -> str | None:
    """Write the actions' resolv.conf (``actions_resolv_conf``) into
    ``directory`` and return its path, or None when actions read the
    host's as it is. A host file that cannot be read counts as empty (the
    C library's loopback default; logged). Raises ``OSError`` when the file
    cannot be written."""
    try:
        text = Path(host).read_text(errors="replace")
    except OSError as error:
        log.warning("cannot read %s (%s): actions get a resolver of their own", host, error)
        text = ""
    replaced = actions_resolv_conf(text, forwarder)
    if replaced is None:
        return None
    path = directory / _NAME
    temporary = directory / f".{_NAME}.new"
    temporary.write_text(replaced)
    os.chmod(temporary, 0o644)  # an unprivileged action user reads it too
    os.replace(temporary, path)
    log.info(
        "actions' name lookups go through %s: the host's resolv.conf names only loopback "
        "nameservers",
        forwarder,
    )
    return str(path)
