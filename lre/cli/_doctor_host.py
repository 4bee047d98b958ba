"""``lre doctor``'s checks of lre and this machine: ``lre``, the ports, disk,
containment, user and clock; docs/commands.md ("lre doctor") says what each
looks at and when it warns or fails.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from lre.cli._byte_text import human_bytes
from lre.cli._checks import Check
from lre.cli._daemon import RunningServer, read_pid_file
from lre.cli._local_stores import LocalStores
from lre.cli._ports import holder_of_port, split_address
from lre.cli._running import Lookup
from lre.config import nearest_existing_dir

#: Below this much free disk lre reports itself unhealthy (as its own health check).
MIN_FREE_BYTES = 1 << 30
#: File-timestamp or clock-step differences tolerated (coarse timestamps, rounding).
CLOCK_TOLERANCE_S = 2.0
#: How far the recorded and the kernel's start time may differ before the
#: pid file no longer matches the process (``RunningServer.alive``).
PID_MATCH_S = 5.0

#: The one recommendation about root (README, doctor, docs/security.md): your
#: own user where unprivileged user namespaces work, root only where not.
RUN_AS = (
    "run lre as your own user where unprivileged user namespaces work (containment "
    "userns); as root only where they do not"
)
CONTAINMENT_FIX = (
    "allow unprivileged user namespaces (then lre, as your own user, uses userns: the "
    "recommended mode); where you cannot, start lre as root (pidns) with action_user: "
    '"unprivileged"; docs/security.md compares the modes'
)


def fetch_status(address: str, timeout: float = 5.0) -> dict[str, Any]:
    """The JSON of ``/status`` at ``address`` (the body of a 503 too).
    Raises ``OSError`` when nothing answers, ``ValueError`` for a body that
    is not a JSON object."""
    try:
        with urllib.request.urlopen(f"http://{address}/status", timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        body = error.read()
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError(f"/status at {address} is not a JSON object")
    return data


def lre_check(lookup: Lookup, status: dict[str, Any] | None, status_error: str) -> Check:
    server = lookup.server
    if server is None:
        return Check(
            "lre",
            "WARN",
            f"not running (no live lre recorded in {lookup.state_dir})",
            "start it: `lre up --detach`",
        )
    where = f"pid {server.pid}, gRPC on {server.grpc_address}"
    if status is None:
        if not server.status_address:
            return Check("lre", "OK", f"running ({where}); its status listener is disabled")
        return Check(
            "lre",
            "FAIL",
            f"running ({where}) but /status does not answer: {status_error}",
            "see `lre logs`; restart with `lre down && lre up --detach`",
        )
    if status.get("status") != "ok":
        problems = "; ".join(str(p) for p in status.get("problems", ())) or "no reason given"
        return Check(
            "lre", "FAIL", f"running ({where}) but unhealthy: {problems}", "see `lre logs`"
        )
    return Check("lre", "OK", f"running and healthy ({where})")


def _answers(address: str) -> str | None:
    """None when a connection to ``address`` (``host:port`` or ``unix:path``)
    succeeds, else why not."""
    try:
        if address.startswith("unix:"):
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(3)
                sock.connect(address.removeprefix("unix:").removeprefix("//"))
            return None
        hostport = split_address(address)
        if hostport is None:
            return f"{address!r} is not host:port"
        with socket.create_connection(hostport, timeout=3):
            return None
    except OSError as error:
        return error.strerror or str(error)


def _running_port_check(name: str, address: str, server: RunningServer) -> Check:
    problem = _answers(address)
    if problem is not None:
        return Check(
            name,
            "FAIL",
            f"lre (pid {server.pid}) should listen on {address} but it does not answer: {problem}",
            "see `lre logs`; restart with `lre down && lre up --detach`",
        )
    hostport = split_address(address)
    holder = holder_of_port(*hostport) if hostport is not None else None
    if holder is not None and not holder.startswith(f"pid {server.pid} "):
        return Check(
            name,
            "FAIL",
            f"{address} answers but is held by {holder}, not by lre (pid {server.pid})",
            "stop that process, then `lre down && lre up --detach`",
        )
    return Check(name, "OK", f"{address} answers (lre, pid {server.pid})")


def _free_port_check(name: str, address: str, option: str) -> Check:
    hostport = split_address(address)
    if hostport is None or hostport[1] == 0:
        return Check(name, "OK", f"{address}: lre picks or creates it at start")
    holder = holder_of_port(*hostport)
    if holder is not None:
        return Check(
            name,
            "FAIL",
            f"{address} is held by {holder}: `lre up` cannot listen there",
            f"stop that process, or choose another port ({option})",
        )
    return Check(name, "OK", f"{address} is free for lre")


def port_checks(lookup: Lookup, written: dict[str, list[Path]] | None = None) -> list[Check]:
    """With lre running: its listeners answer. Without: each port the client
    configs lre wrote (``written``: address -> files) send builds to, then the
    configured ones, is free for ``lre up`` (or who holds it)."""
    server = lookup.server
    if server is not None:
        checks = [_running_port_check("grpc port", server.grpc_address, server)]
        if server.status_address:
            checks.append(_running_port_check("status port", server.status_address, server))
        else:
            checks.append(
                Check(
                    "status port",
                    "WARN",
                    "the status listener is disabled: `lre status`, `lre top`, `lre cache` "
                    "and this doctor cannot ask lre how it is",
                    'set global.status.address (default "127.0.0.1:50061")',
                )
            )
        return checks
    config = lookup.config
    configured = [s.listener.address for s in config.servers]
    checks = []
    for address, files in (written or {}).items():
        check = _free_port_check("grpc port", address, f"`lre up --port N` in {files[0].parent}")
        note = f"the port {', '.join(str(f) for f in files)} sends builds to"
        if configured and address not in configured:
            note += f"; `lre up` without --port listens on {configured[0]} and rewrites it"
        checks.append(dataclasses.replace(check, message=f"{check.message} ({note})"))
    if not checks:
        checks = [_free_port_check("grpc port", a, "`lre up --port N`") for a in configured]
    status = config.global_.status.address
    if status:
        checks.append(_free_port_check("status port", status, "global.status.address"))
    else:
        checks.append(Check("status port", "SKIP", "status listener disabled in the config"))
    return checks


def disk_checks(stores: LocalStores) -> list[Check]:
    from lre.cas import content_usage

    checks = []
    for name, store in stores.blobs:
        where = nearest_existing_dir(store.content_path)
        stat = os.statvfs(where)
        free = stat.f_bavail * stat.f_frsize
        used = content_usage(store.content_path).stored_bytes
        growth = max(0, store.max_bytes - used)
        figures = (
            f"CAS {name} holds {human_bytes(used)} of at most {human_bytes(store.max_bytes)}; "
            f"{human_bytes(free)} free under {where}"
        )
        fix = (
            f"free disk space there, or lower stores[{name}].filesystem.eviction_policy.max_bytes "
            f"(to shrink it now: `lre down`, then `lre cache gc --to SIZE`)"
        )
        if free < MIN_FREE_BYTES:
            checks.append(Check(f"disk {name}", "FAIL", figures + ": disk nearly full", fix))
        elif free < growth:
            checks.append(
                Check(
                    f"disk {name}",
                    "WARN",
                    figures + ": the disk fills up before the CAS reaches its limit",
                    fix,
                )
            )
        else:
            checks.append(Check(f"disk {name}", "OK", figures))
    if not checks:
        checks.append(Check("disk", "SKIP", "no CAS of this configuration is on local disk"))
    return checks


def containment_check(
    server: RunningServer | None,
    status: dict[str, Any] | None,
    refusals: tuple[str, ...] | None = None,
) -> Check:
    """The mode from ``/status``: ``pidns``/``userns`` (a PID namespace per
    action) are OK; ``portable`` (process groups and a sweep), or any protection
    ``/status`` says is missing, is a WARN naming them and the kernel settings
    here that refuse namespaces (``refusals``, read from this machine when None);
    without lre running those settings alone make a WARN."""
    if refusals is None:
        from lre.worker import namespace_refusals  # only when asked: `lre --help` stays light

        refusals = namespace_refusals()
    if server is None or status is None:
        if refusals:
            return Check(
                "containment",
                "WARN",
                "the kernel refuses unprivileged namespaces: " + "; ".join(refusals),
                "without them lre runs actions with containment portable (docs/security.md)",
            )
        return Check("containment", "SKIP", "unknown (lre too old or not running)")
    value = status.get("containment")
    if not value:
        return Check(
            "containment",
            "WARN",
            "unknown (lre too old or not running): its /status names no containment",
            "restart lre with this version: `lre down && lre up --detach`",
        )
    shown = value if isinstance(value, str) else json.dumps(value)
    missing = [str(m) for m in status.get("protections_missing", ()) if m]
    if missing:
        return Check(
            "containment",
            "WARN",
            f"actions run with containment {shown}; missing: " + "; ".join(missing),
            "; ".join(refusals) or CONTAINMENT_FIX,
        )
    if "portable" in shown:
        return Check(
            "containment",
            "WARN",
            f"actions run with containment {shown}: no PID namespace, so a process an action "
            "leaves behind is found by a sweep rather than killed by the kernel",
            CONTAINMENT_FIX,
        )
    return Check("containment", "OK", f"actions run with containment {shown}")


def user_check(server: RunningServer | None) -> Check:
    if server is not None:
        try:
            uid = psutil.Process(server.pid).uids().effective
        except psutil.Error:
            uid = os.geteuid()
        who = f"lre (pid {server.pid}) runs"
    else:
        uid = os.geteuid()
        who = "lre is not running; it would start as you, and you run"
    if uid == 0:
        return Check(
            "user",
            "WARN",
            f"{who} as root: actions run as root too (in a pidns view without "
            "administrative capabilities), unless workers[].local.action_user gives them "
            "another user (docs/security.md)",
            f'{RUN_AS}; staying root, set action_user: "unprivileged" (containment pidns '
            "with sandbox_view)",
        )
    return Check("user", "OK", f"{who} as uid {uid}, not root")


def _timestamp_skew(directory: str) -> float:
    """Seconds between a new file's mtime in ``directory`` and the system clock
    read around its creation (0 when inside that window). ``OSError`` propagates."""
    before = time.time()
    fd, path = tempfile.mkstemp(prefix=".lre-doctor-", dir=directory)
    try:
        os.write(fd, b"lre doctor")
        mtime = os.fstat(fd).st_mtime
    finally:
        os.close(fd)
        os.unlink(path)
    after = time.time()
    if mtime > after:
        return mtime - after
    return max(0.0, before - mtime)


def clock_check(lookup: Lookup, stores: LocalStores) -> Check:
    name = "clock"
    directories = dict.fromkeys(
        nearest_existing_dir(p)
        for p in (str(lookup.state_dir), *(s.content_path for _, s in stores.blobs))
    )
    worst = (0.0, "")
    for directory in directories:
        try:
            skew = _timestamp_skew(directory)
        except OSError as error:
            return Check(
                name,
                "WARN",
                f"cannot write a test file in {directory}: {error}",
                "check its permissions",
            )
        worst = max(worst, (skew, directory))
    if worst[0] > CLOCK_TOLERANCE_S:
        return Check(
            name,
            "WARN",
            f"files written in {worst[1]} get timestamps {worst[0]:.1f} s off the system clock "
            "(a filesystem with its own clock?)",
            "keep LRE_HOME on a local filesystem",
        )
    recorded = read_pid_file(lookup.state_dir)
    step = _clock_step(recorded)
    stamps = f"file timestamps in {', '.join(directories)} follow the system clock"
    if step is not None and abs(step) > CLOCK_TOLERANCE_S:
        assert recorded is not None
        if abs(step) >= PID_MATCH_S:
            return Check(
                name,
                "FAIL",
                f"the wall clock was set {step:+.0f} s since lre (pid {recorded.pid}) started; "
                "`lre status` and `lre down` no longer recognise it",
                f"stop it with `kill {recorded.pid}`, then `lre up --detach`",
            )
        return Check(
            name, "WARN", f"{stamps}; the wall clock was set {step:+.1f} s since lre started"
        )
    since = "; the wall clock was not set since lre started" if step is not None else ""
    return Check(name, "OK", stamps + since + " (no network: not compared with true time)")


def _clock_step(recorded: RunningServer | None) -> float | None:
    """Seconds the wall clock moved since the lre in the pid file started
    (None when there is none, or its pid is no longer an lre)."""
    if recorded is None:
        return None
    try:
        process = psutil.Process(recorded.pid)
        if "lre" not in " ".join(process.cmdline()):
            return None
        return process.create_time() - recorded.started
    except psutil.Error:
        return None


def host_checks(
    lookup: Lookup, stores: LocalStores, written: dict[str, list[Path]] | None = None
) -> list[Check]:
    """lre, its ports (``written``: see ``port_checks``), disk, containment,
    user and clock."""
    server = lookup.server
    status: dict[str, Any] | None = None
    status_error = ""
    if server is not None and server.status_address:
        try:
            status = fetch_status(server.status_address)
        except (OSError, ValueError) as error:
            status_error = str(error)
    return [
        lre_check(lookup, status, status_error),
        *port_checks(lookup, written),
        *disk_checks(stores),
        containment_check(server, status),
        user_check(server),
        clock_check(lookup, stores),
    ]
