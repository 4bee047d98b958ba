"""Fixtures of the scheduler tests: a running scheduler with its fake worker
(``tests._support.scheduler``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from tests._support.scheduler import Harness, start_harness


@pytest.fixture
async def harness(nursery: trio.Nursery) -> AsyncIterator[Harness]:
    yield await start_harness(nursery)
