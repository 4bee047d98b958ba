"""Fixtures of the app tests: a small complete config (``tests._support.configs``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lre.config import Config
from tests._support.configs import app_config_text, config_of


@pytest.fixture
def app_config(tmp_path: Path) -> Config:
    return config_of(app_config_text(tmp_path))
