"""Sockets a view hides and the ones handed in (``_socket_masks``, ``ViewPolicy``)."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lre.cas import MemoryStore, read_bytes
from lre.digest import Digest
from lre.errors import InvalidArgument
from lre.scheduler import Completed
from lre.worker import Containment
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker._view_policy import ViewPolicy
from lre.worker.directories._workdir import WorkDirectory
from lre.worker.view import _socket_masks
from lre.worker.view._socket_masks import SOCKET_PATHS, socket_masks

from .conftest import make_lease, make_spec
from .test_containment import backend


@pytest.fixture
def shown_dir() -> Iterator[Path]:
    """A directory views show (the view replaces /tmp, where tmp_path is)."""
    path = Path(tempfile.mkdtemp(prefix="lre-test-sockets-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_the_masks_include_the_runtime_and_multiplexer_directories_named(
    shown_dir: Path,
) -> None:
    (shown_dir / "real").mkdir()
    (shown_dir / "link").symlink_to(shown_dir / "real")
    environment = {
        "XDG_RUNTIME_DIR": str(shown_dir / "link"),
        "SCREENDIR": "relative/screens",
        "TMUX_TMPDIR": str(shown_dir),
    }
    masks = socket_masks(environment, [0, 1000])
    resolved = {os.path.realpath(p) if os.path.lexists(p) else p for p in SOCKET_PATHS}
    assert resolved <= set(masks)
    assert str(shown_dir / "real") in masks  # symlinks resolved
    assert str(shown_dir / "tmux-0") in masks and str(shown_dir / "tmux-1000") in masks
    assert not any("relative" in p for p in masks)
    assert len(set(masks)) == len(masks)
    assert "/" not in socket_masks({"XDG_RUNTIME_DIR": "/"}, [])


def _policy(tmp: Path, **keywords: object) -> ViewPolicy:
    return ViewPolicy([str(tmp / "lre")], [], xattrs="trusted", **keywords)  # type: ignore[arg-type]


def test_a_socket_handed_in_must_be_absolute_and_outside_lres_directories(
    shown_dir: Path,
) -> None:
    with pytest.raises(InvalidArgument, match=r"sandbox_visible_sockets.*absolute"):
        _policy(shown_dir, visible=["agent.sock"])
    with pytest.raises(InvalidArgument, match=r"sandbox_visible_sockets.*lre's own directory"):
        _policy(shown_dir, visible=[str(shown_dir / "lre" / "cas.sock")])
    with pytest.raises(InvalidArgument, match=r"sandbox_visible_sockets.*lre's own directory"):
        _policy(shown_dir, visible=[str(shown_dir)])  # it holds lre's directory


def test_a_socket_handed_in_is_no_longer_masked_and_is_shown(shown_dir: Path) -> None:
    engine = str(shown_dir / "engine.sock")
    agent = str(shown_dir / "run" / "agent.sock")
    policy = _policy(shown_dir, sockets=[engine, str(shown_dir / "run")], visible=[engine, agent])
    assert set(policy.masks) == {str(shown_dir / "lre"), str(shown_dir / "run")}
    assert policy.visible == (engine, agent)


def test_a_writable_path_inside_a_socket_mask_is_refused(shown_dir: Path) -> None:
    (shown_dir / "run" / "user").mkdir(parents=True)
    with pytest.raises(InvalidArgument, match=r"sandbox_writable_paths.*sockets there"):
        ViewPolicy(
            [],
            [str(shown_dir / "run" / "user")],
            xattrs="trusted",
            sockets=[str(shown_dir / "run")],
        )


_CONNECT = """
import socket, sys
for path in sys.argv[1:]:
    client = socket.socket(socket.AF_UNIX)
    try:
        client.connect(path)
        print(path, "connected")
    except OSError as error:
        print(path, type(error).__name__)
"""


@pytest.mark.parametrize("name", ["pidns", "userns"])
async def test_a_view_hides_masked_sockets_and_shows_those_handed_in(
    shown_dir: Path, tmp_path: Path, store: MemoryStore, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    containment: Containment = backend(name)
    runtime = shown_dir / "runtime"
    resolve = runtime / "resolve"
    resolve.mkdir(parents=True)
    (resolve / "stub-resolv.conf").write_text("nameserver 127.0.0.53\n")
    listeners = []
    for path in (shown_dir / "engine.sock", runtime / "agent.sock", runtime / "bus.sock"):
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(path))
        listener.listen(8)
        listeners.append(listener)
    engine, agent, bus = (str(s.getsockname()) for s in listeners)
    monkeypatch.setattr(_socket_masks, "SOCKET_PATHS", (engine, str(runtime)))
    monkeypatch.setattr(_socket_masks, "SHOWN_INSIDE", (str(resolve),))
    monkeypatch.setattr("lre.worker._view_policy.SHOWN_INSIDE", (str(resolve),))
    spec = make_spec(tmp_path, sandbox_visible_sockets=(agent,))
    script = f"cat {resolve}/stub-resolv.conf; python3 -c '{_CONNECT}' {engine} {agent} {bus}"
    try:
        with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
            runner = ActionRunner(RunnerContext(spec, workdir, store, containment=containment))
            outcome = await runner.run(await make_lease(store, ["/bin/sh", "-c", script]))
    finally:
        for listener in listeners:
            listener.close()
    assert isinstance(outcome, Completed) and outcome.error is None, outcome
    stdout = await read_bytes(store, Digest.from_proto(outcome.result.stdout_digest, field=""))
    assert stdout.decode().splitlines() == [
        "nameserver 127.0.0.53",
        f"{engine} ConnectionRefusedError",  # /dev/null in its place
        f"{agent} connected",
        f"{bus} FileNotFoundError",  # under an empty tmpfs
    ], stdout
