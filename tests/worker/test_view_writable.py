"""Writable host paths: opened without symlinks and judged by device and inode.

The attacks a build can make with ``sandbox-writable-path`` and symlinks,
through a real view (pidns as root, userns), with every directory involved
under /var/tmp (the view hides /tmp: a victim there would look safe only
because the action cannot see it), and the judgement on its own.
"""

from __future__ import annotations

import errno
import os
import shutil
import site
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lre.app import AppBuildError, Application
from lre.cas import MemoryStore, read_bytes
from lre.config import resolve
from lre.config._loader import load_config_text
from lre.digest import Digest
from lre.errors import InvalidArgument
from lre.scheduler import Completed
from lre.worker import Containment
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker._view_policy import ViewPolicy, homes, installation, protected_marks
from lre.worker.directories._workdir import WorkDirectory
from lre.worker.view import _view_writable
from lre.worker.view._view_writable import (
    Protected,
    WritableRefused,
    judge,
    mark_of,
    open_without_symlinks,
)
from tests._support.configs import app_config_text

from .conftest import make_lease, make_spec
from .test_containment import backend


@pytest.fixture(params=["pidns", "userns"])
def viewing(request: pytest.FixtureRequest) -> Containment:
    containment = backend(request.param)
    assert containment.can_view, f"{request.param} gives actions no view here"
    return containment


@pytest.fixture
def shown() -> Iterator[Path]:
    """A fresh directory outside /tmp, which the view shows as the host's."""
    path = Path(tempfile.mkdtemp(prefix="lre-writable-test-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def _run(
    tmp_path: Path,
    store: MemoryStore,
    containment: Containment,
    script: str,
    *,
    writable: tuple[Path, ...],
    platform: dict[str, str] | None = None,
    hidden: tuple[Path, ...] = (),
    before: Callable[[], None] | None = None,
) -> Completed:
    """Run ``script`` in a view with ``writable`` configured; ``before``
    runs on the host once the worker started (its policy is made)."""
    spec = make_spec(tmp_path, sandbox_writable_paths=tuple(str(p) for p in writable))
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(
            RunnerContext(
                spec,
                workdir,
                store,
                containment=containment,
                hidden_paths=tuple(str(p) for p in hidden),
            )
        )
        if before is not None:
            before()
        lease = await make_lease(store, ["/bin/sh", "-c", script], platform=platform or {})
        outcome = await runner.run(lease)
    assert isinstance(outcome, Completed), outcome
    return outcome


async def _stdout(store: MemoryStore, outcome: Completed) -> bytes:
    assert outcome.error is None, outcome
    return await read_bytes(store, Digest.from_proto(outcome.result.stdout_digest, field=""))


def _refused(outcome: Completed, field: str, path: Path | str) -> None:
    assert isinstance(outcome.error, InvalidArgument), outcome
    assert field in outcome.message and str(path) in outcome.message, outcome.message


@pytest.mark.attack("view: a build names a writable path outside the configured ones")
async def test_a_property_outside_the_configured_paths_is_refused(
    tmp_path: Path, store: MemoryStore, viewing: Containment, shown: Path
) -> None:
    allowed, victim = shown / "allowed", shown / "victim"
    allowed.mkdir()
    victim.mkdir()
    script = f"echo ran > {allowed}/ran; echo forged > {victim}/forged"
    platform = {"sandbox-writable-path": str(victim)}
    outcome = await _run(tmp_path, store, viewing, script, writable=(allowed,), platform=platform)
    assert not (victim / "forged").exists()
    _refused(outcome, "sandbox-writable-path", victim)
    # The same action without the property runs: the refusal is the property's.
    ran = await _run(tmp_path, store, viewing, script, writable=(allowed,))
    assert ran.error is None and (allowed / "ran").read_text() == "ran\n", ran
    assert not (victim / "forged").exists()


@pytest.mark.attack("view: one action's symlink in a writable path leads another's mount")
async def test_a_symlink_left_by_one_action_does_not_lead_anothers_mount(
    tmp_path: Path, store: MemoryStore, viewing: Containment, shown: Path
) -> None:
    """The first action leaves ``link -> victim`` in its writable path; the
    second, which has that path only through the property it names
    (``link/sub``), must not get the victim writable."""
    allowed, victim, elsewhere = shown / "allowed", shown / "victim", shown / "elsewhere"
    (victim / "sub").mkdir(parents=True)
    allowed.mkdir()
    elsewhere.mkdir()
    first = await _run(
        tmp_path, store, viewing, f"ln -s {victim} {allowed}/link", writable=(allowed,)
    )
    assert first.error is None and (allowed / "link").is_symlink(), first
    named = allowed / "link" / "sub"
    outcome = await _run(
        tmp_path,
        store,
        viewing,
        f"echo forged > {named}/forged",
        writable=(elsewhere,),
        platform={"sandbox-writable-path": str(named)},
    )
    assert not (victim / "sub" / "forged").exists()
    _refused(outcome, "sandbox-writable-path", named)


@pytest.mark.attack("view: a writable path named through a symlink below a configured one")
async def test_a_symlink_below_a_configured_path_is_refused(
    tmp_path: Path, store: MemoryStore, viewing: Containment, shown: Path
) -> None:
    """The first action leaves ``link -> victim`` in the writable path; the
    second names ``link/sub`` (lexically below the configured path): it is
    refused where the view is built, naming the property."""
    allowed, victim = shown / "allowed", shown / "victim"
    (victim / "sub").mkdir(parents=True)
    allowed.mkdir()
    first = await _run(
        tmp_path, store, viewing, f"ln -s {victim} {allowed}/link", writable=(allowed,)
    )
    assert first.error is None and (allowed / "link").is_symlink(), first
    named = allowed / "link" / "sub"
    outcome = await _run(
        tmp_path,
        store,
        viewing,
        f"echo forged > {named}/forged",
        writable=(allowed,),
        platform={"sandbox-writable-path": str(named)},
    )
    _refused(outcome, "sandbox-writable-path", named)
    assert "symbolic link" in outcome.message, outcome.message
    assert not (victim / "sub" / "forged").exists()


@pytest.mark.attack("view: an ancestor of a configured writable path becomes a symlink")
async def test_an_ancestor_swapped_for_a_symlink_after_start_up_is_refused(
    tmp_path: Path, store: MemoryStore, viewing: Containment, shown: Path
) -> None:
    configured = shown / "d" / "cache"
    victim = shown / "victim" / "cache"
    configured.mkdir(parents=True)
    victim.mkdir(parents=True)

    def swap() -> None:
        (shown / "d").rename(shown / "d.old")
        (shown / "d").symlink_to(victim.parent)

    outcome = await _run(
        tmp_path,
        store,
        viewing,
        f"echo forged > {configured}/forged",
        writable=(configured,),
        before=swap,
    )
    assert not (victim / "forged").exists()
    _refused(outcome, "sandbox_writable_paths", configured)


@pytest.mark.attack("view: lre's directory inside a writable path is moved and replaced")
async def test_a_mask_goes_on_lres_directory_not_on_its_replacement(
    tmp_path: Path, store: MemoryStore, viewing: Containment, shown: Path
) -> None:
    """lre's directory lies inside a writable path; after start-up someone
    renames its parent and leaves a decoy at the old path: the mask must not
    go on the decoy, leaving lre's directory writable at its new path."""
    state = shown / "lre" / "state"
    state.mkdir(parents=True)
    (state / "secret").write_text("lre's own\n")
    moved = shown / "moved" / "state"

    def swap() -> None:
        (shown / "lre").rename(shown / "moved")
        state.mkdir(parents=True)

    outcome = await _run(
        tmp_path,
        store,
        viewing,
        f"cat {moved}/secret; echo forged > {moved}/secret",
        writable=(shown,),
        hidden=(state,),
        before=swap,
    )
    assert (moved / "secret").read_text() == "lre's own\n"
    _refused(outcome, "sandbox_writable_paths", state)


async def test_lres_directory_inside_a_writable_path_stays_hidden(
    tmp_path: Path, store: MemoryStore, viewing: Containment, shown: Path
) -> None:
    state = shown / "lre" / "state"
    state.mkdir(parents=True)
    (state / "secret").write_text("lre's own\n")
    outcome = await _run(
        tmp_path,
        store,
        viewing,
        f"ls -A {state}; echo end; echo ok > {shown}/ok",
        writable=(shown,),
        hidden=(state,),
    )
    assert await _stdout(store, outcome) == b"end\n"
    assert (shown / "ok").read_text() == "ok\n"


def _policy(writable: tuple[str, ...]) -> ViewPolicy:
    """A worker's policy with these configured writable paths (judged now)."""
    return ViewPolicy((), writable, xattrs="trusted")


@pytest.mark.parametrize("which", ["site-packages", "lre", "home"])
def test_a_configured_path_inside_the_installation_or_home_is_refused_at_start_up(
    which: str,
) -> None:
    root = {
        "site-packages": site.getsitepackages()[0],
        "lre": str(Path(_view_writable.__file__).parents[2]),
        "home": homes()[0],
    }[which]
    assert os.path.isdir(root), root
    with pytest.raises(InvalidArgument) as raised:
        _policy((root,))
    assert "sandbox_writable_paths" in raised.value.message and root in raised.value.message


def test_a_configured_path_holding_the_home_or_the_installation_is_refused() -> None:
    above = os.path.dirname(homes()[0]) or "/"
    with pytest.raises(InvalidArgument) as raised:
        _policy((above,))
    assert "contains" in raised.value.message and above in raised.value.message


def test_a_configured_path_through_a_symlink_is_refused(shown: Path) -> None:
    (shown / "real").mkdir()
    (shown / "link").symlink_to(shown / "real")
    with pytest.raises(InvalidArgument) as raised:
        _policy((str(shown / "link"),))
    assert "symbolic link" in raised.value.message and "sandbox_writable_paths" in (
        raised.value.message
    )
    _policy((str(shown / "real"),))  # the real directory is fine


def test_the_judgement_is_by_inode_not_by_name(shown: Path) -> None:
    """A protected directory reached by another name (here: its own, while
    the marks were taken under another) is still refused, inside it too."""
    protected = shown / "protected"
    (protected / "inner").mkdir(parents=True)
    mark = mark_of(str(protected))
    assert mark is not None
    rules = Protected(within=((mark[0], mark[1], "/elsewhere"),))
    for path in (protected, protected / "inner"):
        fd = open_without_symlinks(str(path))
        try:
            with pytest.raises(WritableRefused, match="/elsewhere"):
                judge(str(path), fd, rules)
        finally:
            os.close(fd)
    within, containing = protected_marks([str(protected / "inner")])
    fd = open_without_symlinks(str(shown))
    try:
        with pytest.raises(WritableRefused, match="contains"):
            judge(str(shown), fd, Protected(within=within, containing=containing))
    finally:
        os.close(fd)


def test_without_openat2_each_component_is_opened_without_following(
    shown: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing(path: str) -> int:
        raise OSError(errno.ENOSYS, "openat2: not here")

    monkeypatch.setattr(_view_writable, "_openat2", missing)
    (shown / "real" / "sub").mkdir(parents=True)
    (shown / "link").symlink_to(shown / "real")
    for path in (shown / "link", shown / "link" / "sub"):
        with pytest.raises(WritableRefused, match="symbolic link"):
            open_without_symlinks(str(path))
    fd = open_without_symlinks(str(shown / "real" / "sub"))
    try:
        assert os.fstat(fd).st_ino == os.stat(shown / "real" / "sub").st_ino
    finally:
        os.close(fd)


def test_the_installation_covers_the_python_and_lre() -> None:
    found = installation()
    assert os.path.abspath(sys.prefix) in found
    assert str(Path(_view_writable.__file__).parents[2]) in found


def test_a_home_of_slash_protects_nothing(shown: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Service users (systemd's DynamicUser, some distributions' nobody) have
    ``/`` as their home: it must not make every writable path refused."""
    monkeypatch.setenv("HOME", "/")
    assert "/" not in homes()
    _policy((str(shown),))


@pytest.mark.parametrize("kind", ["symlink", "home"])
def test_lre_does_not_start_with_an_unsafe_writable_path(
    tmp_path: Path, shown: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Judged when lre is built, before any worker starts, naming the
    worker's field and the path."""
    (shown / "real").mkdir()
    (shown / "link").symlink_to(shown / "real")
    if kind == "home":
        monkeypatch.setenv("HOME", str(shown))
    path = shown / ("link" if kind == "symlink" else "real")
    (tmp_path / "lre").mkdir()
    text = app_config_text(tmp_path / "lre", extra_worker=f', sandbox_writable_paths: ["{path}"]')
    with pytest.raises(AppBuildError) as raised:
        Application(resolve(load_config_text(text, source="t.json5")))
    message = str(raised.value)
    assert "workers[0].local.sandbox_writable_paths" in message and str(path) in message
    assert ("symbolic link" if kind == "symlink" else f"lies inside {str(shown)!r}") in message
