"""Attacks on lre through writable host paths, from inside real actions.

A whole lre (``test_view_attacks._start``) run as root under pidns, and
under userns as root and as ``nobody``, with one configured writable path.
The builds try to get a host directory writable that the configuration did
not give: by naming it (``sandbox-writable-path``: the site-packages of the
Python running lre, the home of lre's user, any other directory), and with
symlinks leading a mount into lre's CAS (one action's symlink followed by
another's mount; an ancestor of a configured path swapped after start-up).

Victims (the CAS, the home) live under /var/tmp, where the view shows the
host. The attacker's directories are under /dev/shm: a view renews /dev/shm
(and /tmp) as an empty tmpfs and makes a writable path there afresh inside
it, outside every mask of lre's directories, which is where a mount that
followed a symlink into the CAS stayed writable (elsewhere the CAS's mask
covers such a mount). Each attack is seen to run: the refusal is checked as
the INVALID_ARGUMENT the client gets, and a control action writes the
configured path.
"""

from __future__ import annotations

import os
import shutil
import site
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from lre.digest import digest_of
from lre.proto import re_pb2
from tests._support.reapi import digest

from .test_view_attacks import Lre, _start

#: (backend, lre's user, action_user) of the lres that make views (under
#: portable there is no view: the host is as writable to an action as to
#: lre's user, writable paths or not; docs/security.md).
SETUPS = (("pidns", "own", "root"), ("userns", "own", "root"), ("userns", "nobody", "root"))
_IDS = [f"{b}-{i}-actions-{a}" for b, i, a in SETUPS]
_PROPERTY = "sandbox-writable-path"


@dataclass
class Scene:
    lre: Lre
    #: The configured writable path (shown writable in every view).
    configured: Path
    #: A directory of the attacker's under /dev/shm, not configured.
    loose: Path


def _open_dir(parent: str, prefix: str) -> Path:
    """A fresh directory anyone may write (the action may be nobody)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(path, 0o777)
    return path


@pytest.fixture(scope="module", params=SETUPS, ids=_IDS)
def scene(request: pytest.FixtureRequest) -> Iterator[Scene]:
    backend, identity, action_user = request.param
    attacker = _open_dir("/dev/shm", "lre-writable-attack-")
    try:
        configured = _open_dir(str(attacker), "configured-")
        loose = _open_dir(str(attacker), "loose-")
        extra = f', sandbox_writable_paths: ["{configured}"]'
        for lre in _start(backend, identity, action_user, extra):
            yield Scene(lre, configured, loose)
    finally:
        shutil.rmtree(attacker, ignore_errors=True)


def _run(lre: Lre, script: str, writable: str | None = None) -> re_pb2.ExecuteResponse:
    platform = {_PROPERTY: writable} if writable is not None else {}
    return lre.client.run(["/bin/sh", "-c", script], action_platform=platform)


def _refused(response: re_pb2.ExecuteResponse, *named: str) -> None:
    """The action was refused before it ran, INVALID_ARGUMENT naming each of ``named``."""
    status = response.status
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0], status
    for text in named:
        assert text in status.message, status.message


def _control(scene: Scene) -> None:
    """An action of this lre writes its configured path: the attacks' actions
    would have run."""
    mark = os.urandom(4).hex()
    response = _run(scene.lre, f"echo {mark} > {scene.configured}/control")
    assert response.status.code == 0 and response.result.exit_code == 0, response
    assert (scene.configured / "control").read_text() == f"{mark}\n"


def _stored_blob(lre: Lre) -> tuple[bytes, Path]:
    blob = f"stored {os.urandom(8).hex()}\n".encode()
    lre.client.upload([blob])
    return blob, lre.cas_file(digest(blob).hash)


def _intact(lre: Lre, blob: bytes, path: Path) -> None:
    assert path.read_bytes() == blob
    assert lre.client.read_blob(digest_of(blob)) in (blob, None)


@pytest.mark.attack("writable: a build names the site-packages of lre's Python writable")
def test_a_build_names_lres_site_packages(scene: Scene) -> None:
    packages = site.getsitepackages()[0]
    planted = Path(packages) / f"lre-attack-{os.urandom(4).hex()}.pth"
    try:
        response = _run(scene.lre, f"echo 'import os' > {planted}", packages)
        assert not planted.exists()
    finally:
        planted.unlink(missing_ok=True)
    _refused(response, _PROPERTY, packages)
    _control(scene)


@pytest.mark.attack("writable: a build names the home of lre's user writable")
def test_a_build_names_lres_home(scene: Scene) -> None:
    home = scene.lre.home  # $HOME of this lre
    response = _run(scene.lre, f"echo forged >> {home}/.bashrc", str(home))
    assert not (home / ".bashrc").exists()
    _refused(response, _PROPERTY, str(home))
    _control(scene)


@pytest.mark.attack("writable: a build names a directory the config does not list")
def test_a_build_names_an_unconfigured_directory(scene: Scene) -> None:
    victim = _open_dir("/var/tmp", "lre-writable-victim-")
    try:
        response = _run(scene.lre, f"echo forged > {victim}/forged", str(victim))
        assert not (victim / "forged").exists()
    finally:
        shutil.rmtree(victim, ignore_errors=True)
    _refused(response, _PROPERTY, str(victim))
    _control(scene)


@pytest.mark.attack("writable: one action's symlink leads another's mount into the CAS")
def test_one_actions_symlink_leads_anothers_mount_into_the_cas(scene: Scene) -> None:
    """The first action names a directory of its own writable and leaves
    ``store -> <lre's CAS>`` in it; the second names ``store/<xx>`` and
    rewrites a stored blob there."""
    lre = scene.lre
    blob, path = _stored_blob(lre)
    store = scene.loose / "store"
    first = _run(lre, f"ln -s {path.parents[1]} {store}", str(scene.loose))
    named = store / path.parent.name
    target = named / path.name
    second = _run(lre, f"chmod u+w {target}; echo forged > {target}", str(named))
    _intact(lre, blob, path)
    _refused(first, _PROPERTY, str(scene.loose))
    _refused(second, _PROPERTY, str(named))
    assert not store.is_symlink()
    _control(scene)


@pytest.mark.attack("writable: a symlink below a configured path leads a mount into the CAS")
def test_a_symlink_below_the_configured_path_leads_nowhere(scene: Scene) -> None:
    """The same through the configured path: the first action leaves the
    symlink there, the second names ``store/<xx>`` below it."""
    lre = scene.lre
    blob, path = _stored_blob(lre)
    store = scene.configured / f"store-{os.urandom(4).hex()}"
    first = _run(lre, f"ln -s {path.parents[1]} {store}")
    assert first.status.code == 0 and store.is_symlink(), first
    named = store / path.parent.name
    target = named / path.name
    second = _run(lre, f"chmod u+w {target}; echo forged > {target}", str(named))
    _intact(lre, blob, path)
    _refused(second, _PROPERTY, str(named), "symbolic link")


@pytest.fixture(params=SETUPS, ids=_IDS)
def swapped(request: pytest.FixtureRequest) -> Iterator[tuple[Lre, Path, bytes, Path]]:
    """An lre whose configured writable path ``<dir>/d/<xx>`` (``xx`` the
    CAS directory of a blob it stores) was real at start-up; ``d`` is then
    replaced by a symlink to lre's CAS."""
    backend, identity, action_user = request.param
    blob = f"stored {os.urandom(8).hex()}\n".encode()
    prefix = digest(blob).hash[:2]
    attacker = _open_dir("/dev/shm", "lre-writable-swap-")
    try:
        configured = attacker / "d" / prefix
        configured.mkdir(parents=True)
        for path in (configured, configured.parent):
            os.chmod(path, stat.S_IRWXU | stat.S_IRWXG | stat.S_IRWXO)
        extra = f', sandbox_writable_paths: ["{configured}"]'
        for lre in _start(backend, identity, action_user, extra):
            lre.client.upload([blob])
            path = lre.cas_file(digest(blob).hash)
            (attacker / "d").rename(attacker / "d.old")
            (attacker / "d").symlink_to(path.parents[1])
            yield lre, configured, blob, path
    finally:
        shutil.rmtree(attacker, ignore_errors=True)


@pytest.mark.attack("writable: an ancestor of a configured path is swapped for a symlink")
def test_an_ancestor_of_a_configured_path_swapped_after_start_up(
    swapped: tuple[Lre, Path, bytes, Path],
) -> None:
    lre, configured, blob, path = swapped
    target = configured / path.name
    response = _run(lre, f"chmod u+w {target}; echo forged > {target}")
    _intact(lre, blob, path)
    _refused(response, "sandbox_writable_paths", str(configured), "symbolic link")
