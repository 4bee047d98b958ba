"""The public surface of lre.cas: other packages rely on exactly these names."""

from __future__ import annotations

import lre.cas


def test_public_names_come_from_the_package() -> None:
    # The exact names are pinned in tests/test_public_api.py, with every package's.
    assert sorted(lre.cas.__all__) == lre.cas.__all__
    for name in lre.cas.__all__:
        assert getattr(lre.cas, name).__module__.startswith("lre.cas")


def test_stores_satisfy_the_protocols() -> None:
    memory = lre.cas.MemoryStore(1)
    fs = lre.cas.FilesystemStore("/nonexistent/c", "/nonexistent/t", 1)
    for store in (memory, fs, lre.cas.VerifyStore(memory), lre.cas.FastSlowStore(memory, fs)):
        assert isinstance(store, lre.cas.BlobStore)
        assert store.capabilities().pin is not None
    assert isinstance(lre.cas.MemoryActionCache(), lre.cas.ActionCache)
    assert isinstance(lre.cas.FilesystemActionCache("/nonexistent/ac"), lre.cas.ActionCache)
