"""Whether this run is CI's, by the one rule the whole suite uses."""

from __future__ import annotations

import os

#: Values of ``CI`` that do not mean "this is CI" (unset counts as empty).
_NOT_CI = frozenset(("", "0", "false", "no", "off"))


def in_ci() -> bool:
    """True when ``CI`` holds any true value (``true``, ``1``, ``yes``, ...).

    Under CI a skipped test fails (tests/conftest.py): CI must have every
    tool the suite uses, so a missing one is a failure there, never a skip.
    """
    return os.environ.get("CI", "").strip().lower() not in _NOT_CI
