"""One BuildGrid for every test of this package (starting one takes 15-60 s)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.team._buildgrid import BuildGrid


@pytest.fixture(scope="session")
def buildgrid() -> Iterator[BuildGrid]:
    """A running BuildGrid; a test that stopped it leaves it to be restarted
    by the next user (``running_buildgrid``). Its state lives outside pytest's
    private tmp directory: PostgreSQL runs as user postgres when we are root
    and must reach it."""
    top = Path(tempfile.mkdtemp(prefix="lre-buildgrid-"))
    top.chmod(0o755)
    grid = BuildGrid(top / "state")
    try:
        grid.start()
        yield grid
    finally:
        grid.stop()
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def running_buildgrid(buildgrid: BuildGrid) -> BuildGrid:
    """The session's BuildGrid, restarted first if an earlier test stopped it."""
    if not buildgrid.server_alive():
        buildgrid.start()
    return buildgrid
