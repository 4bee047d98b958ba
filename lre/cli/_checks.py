"""One result of ``lre doctor``: a named check, its verdict, and the fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["OK", "WARN", "FAIL", "SKIP"]


@dataclass(frozen=True, slots=True)
class Check:
    """``status``: OK (fine), WARN (works, but likely not as meant), FAIL (a
    build through lre will not work until ``fix`` is done) or SKIP (does not
    apply here). ``fix`` is the exact step to take; empty when nothing is."""

    name: str
    status: Verdict
    message: str
    fix: str = ""
