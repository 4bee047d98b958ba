"""bench/mutations.py: every checked-in mutation still applies to the code it
breaks (the run itself, which takes minutes, is bench/mutations.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _mutations_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "lre_bench_mutations", ROOT / "bench" / "mutations.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


MUTATIONS = _mutations_module()


@pytest.mark.parametrize("mutation", MUTATIONS.MUTATIONS, ids=lambda m: m.name)
def test_mutation_applies(mutation) -> None:  # type: ignore[no-untyped-def]
    assert MUTATIONS.check_applies(mutation) is None
    assert mutation.old != mutation.new
    for argument in mutation.tests:
        if argument.startswith("tests/"):
            assert (ROOT / argument.split("::")[0]).exists(), argument


def test_names_are_unique() -> None:
    names = [m.name for m in MUTATIONS.MUTATIONS]
    assert len(names) == len(set(names))
