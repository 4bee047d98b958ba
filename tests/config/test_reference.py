"""docs/configuration.md is generated from the models and must be current."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys
from pathlib import Path

from lre.config import Config
from lre.config._decode import json_key_of, model_fields
from lre.config.reference import _classes, render

ROOT = Path(__file__).resolve().parents[2]


def test_committed_reference_is_current() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == render(), (
        "docs/configuration.md is stale; run "
        "`python -m lre.config.reference > docs/configuration.md`"
    )


def test_every_field_is_documented() -> None:
    text = render()
    classes = [cls for cls, _ in _classes()]
    assert Config in classes
    for cls in classes:
        assert f"### {cls.__name__}" in text
        for name, field in model_fields(cls).items():
            assert field.doc, f"{cls.__name__}.{name} has no doc"
            assert f"| `{json_key_of(cls, name)}` |" in text
    assert "| `global` |" in text


def test_generator_runs_as_a_module() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lre.config.reference"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout == render()


def test_all_model_classes_are_reachable() -> None:
    """Every model class of every section's module is documented (reached from Config)."""
    modules = sorted((ROOT / "lre" / "config").glob("_*models.py"))
    assert len(modules) == 5  # _models and the four sections' modules
    defined = {
        obj
        for path in modules
        for obj in vars(importlib.import_module(f"lre.config.{path.stem}")).values()
        if isinstance(obj, type) and dataclasses.is_dataclass(obj)
    }
    assert defined == {cls for cls, _ in _classes()}
