"""Name lookups from the actions' network: where the host names only a
loopback resolver (systemd-resolved's 127.0.0.53), actions read a
resolv.conf naming slirp4netns's forwarder, and a real lookup from a real
action reaches that resolver; elsewhere they read the host's own."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lre.worker.containment._action_dns import (
    FORWARDER,
    actions_resolv_conf,
    write_actions_resolv_conf,
)
from tests._support.loopback_resolver import answer
from tests._support.lre_as import require_setup
from tests._support.scratch import shown_scratch

_HOST = Path(__file__).parents[1] / "_support" / "loopback_resolver.py"


@pytest.mark.parametrize(
    "text",
    [
        "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch corp.example\n",
        "nameserver 127.0.0.1\nnameserver ::1\n",
        "# no nameserver: the C library asks 127.0.0.1\nsearch corp.example\n",
        "",
    ],
)
def test_loopback_only_nameservers_are_replaced_by_the_forwarder(text: str) -> None:
    replaced = actions_resolv_conf(text)
    assert replaced is not None
    lines = replaced.splitlines()
    servers = [line for line in lines if line.startswith("nameserver")]
    assert servers == [f"nameserver {FORWARDER}"]
    for line in text.splitlines():  # search, options and comments kept
        if not line.startswith("nameserver"):
            assert line in lines


@pytest.mark.parametrize(
    "text",
    [
        "nameserver 10.255.255.53\n",
        "nameserver 127.0.0.53\nnameserver 192.0.2.1\n",
        "nameserver 2001:db8::53\n",
    ],
)
def test_a_reachable_nameserver_leaves_the_hosts_file_alone(text: str, tmp_path: Path) -> None:
    assert actions_resolv_conf(text) is None
    host = tmp_path / "resolv.conf"
    host.write_text(text)
    assert write_actions_resolv_conf(tmp_path, host=str(host)) is None
    assert not (tmp_path / "actions-resolv.conf").exists()


def test_the_file_written_is_readable_by_any_action_user(tmp_path: Path) -> None:
    host = tmp_path / "resolv.conf"
    host.write_text("nameserver 127.0.0.53\nsearch corp.example\n")
    written = write_actions_resolv_conf(tmp_path, host=str(host))
    assert written is not None
    assert Path(written).stat().st_mode & 0o777 == 0o644
    assert f"nameserver {FORWARDER}" in Path(written).read_text()


def test_the_test_resolver_answers_its_record() -> None:
    query = bytes.fromhex("abcd01000001000000000000") + b"\x05build\x04deps\x00\x00\x01\x00\x01"
    reply = answer(query, "build.deps", "192.0.2.7")
    assert (
        reply[:2] == b"\xab\xcd" and reply[3] & 0xF == 0 and reply.endswith(bytes([192, 0, 2, 7]))
    )
    other = answer(query.replace(b"build", b"other"), "build.deps", "192.0.2.7")
    assert other[3] & 0xF == 3  # NXDOMAIN


_SETUPS = [("pidns", "own"), ("userns", "own"), ("userns", "nobody")]


@pytest.mark.parametrize(("containment", "identity"), _SETUPS, ids=[f"{c}-{i}" for c, i in _SETUPS])
def test_an_action_resolves_a_name_through_the_hosts_loopback_resolver(
    containment: str, identity: str
) -> None:
    """The whole path on a host like a laptop (its only nameserver
    127.0.0.53, its own /etc/resolv.conf, in namespaces of the test's own):
    an action of a real lre looks a short name up through the search list
    and gets the resolver's record, and the resolver saw the query."""
    require_setup(containment, identity)
    unshare = shutil.which("unshare")
    if unshare is None or shutil.which("slirp4netns") is None:
        pytest.fail("util-linux unshare and slirp4netns are needed")
    namespaces = [unshare, "--net", "--mount", "--propagation", "private", "--"]
    with shown_scratch(identity) as scratch:
        request = {
            "scratch": str(scratch),
            "identity": identity,
            "containment": containment,
            "name": "build-deps.corp.example",
            "address": "192.0.2.7",
            "script": "cat /etc/resolv.conf; getent ahostsv4 build-deps",
        }
        done = subprocess.run(
            [*namespaces, sys.executable, str(_HOST), json.dumps(request)],
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["status"] == 0, outcome
    assert f"nameserver {FORWARDER}" in outcome["stdout"], outcome
    assert "search corp.example" in outcome["stdout"], outcome
    assert outcome["exit_code"] == 0, outcome
    assert "192.0.2.7" in outcome["stdout"], outcome
    assert "build-deps.corp.example" in outcome["queries"], outcome
