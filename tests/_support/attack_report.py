"""The ``attack`` marker and the results file ``bench/security_table.py`` reads.

An attack test is the attack itself, run from inside a real action; it passes
when lre held. Mark it ``@pytest.mark.attack("class of attack")``. Its backend
is the value of a ``containment`` or ``backend`` parameter (a string, or an
object with a ``name``), else ``"-"``; its identity is an ``identity``
parameter when the test has one (``"own"``, lre's own user, is written as the
name of the user running the tests), else that user; its action user is the
``workers[].local.action_user`` its lre ran with, ``"root"`` (the default,
lre's own user) unless the test says otherwise. All three come from an
``lre`` parameter (else any parameter) that is a ``(backend, identity,
action_user)`` triple (test_view_attacks.py, test_writable_attacks.py).

With ``LRE_ATTACK_RESULTS=/path/file.jsonl`` set, each attack test's outcome
is appended to that file as one JSON object per line::

    {"attack": "...", "backend": "pidns", "identity": "root", "action_user": "root",
     "outcome": "held" | "broken" | "skipped", "test": "<node id>"}

A failing or erroring attack test is ``broken``; a skipped one ``skipped``;
one that passed after calling ``known_missing()`` (the backend is known not
to hold that attack, and the test checked that it indeed did not) is
``missing``.
Nothing is written without the variable (an unwritable path fails the run).
"""

from __future__ import annotations

import json
import os
import pwd
from typing import Any

import pytest

RESULTS_VARIABLE = "LRE_ATTACK_RESULTS"
#: Node ids of tests that called ``known_missing`` (per test process).
_MISSING: set[str] = set()


def known_missing() -> None:
    """Mark the running attack test's outcome as a known missing protection:
    it passes (the attack worked, as documented) and is written as
    ``missing`` instead of ``held``."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    _MISSING.add(current.rsplit(" (", 1)[0])


def _param_name(value: object) -> str:
    if isinstance(value, str):
        return value
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else str(value)


def _own_identity() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def describe(item: pytest.Item) -> dict[str, str] | None:
    """The attack class, backend and identity of ``item``; None when unmarked."""
    marker = item.get_closest_marker("attack")
    if marker is None:
        return None
    if not marker.args or not isinstance(marker.args[0], str):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.attack needs the class as a string")
    params: dict[str, Any] = getattr(getattr(item, "callspec", None), "params", {})
    backend = "-"
    for key in ("containment", "backend"):
        if key in params:
            backend = _param_name(params[key])
            break
    identity = _param_name(params["identity"]) if "identity" in params else "own"
    action_user = "root"
    # test_view_attacks: one lre per (backend, identity, action user), as
    # ``lre`` (or another fixture's parameter, test_writable_attacks).
    triples = [v for v in params.values() if isinstance(v, tuple) and len(v) == 3]
    setup = params.get("lre", triples[0] if triples else None)
    if isinstance(setup, tuple) and len(setup) == 3:
        backend, identity, action_user = (str(part) for part in setup)
    if identity == "own":  # lre's own user: the one running the tests
        identity = _own_identity()
    return {
        "attack": marker.args[0],
        "backend": backend,
        "identity": identity,
        "action_user": action_user,
    }


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "attack(name): a hostile action; its outcome goes to the security table "
        "(see tests/_support/attack_report.py)",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    path = os.environ.get(RESULTS_VARIABLE)
    described = describe(item) if path else None
    if path and described is not None:
        outcome = None
        if report.when == "call" or (report.when == "setup" and not report.passed):
            if report.skipped:
                outcome = "skipped"
            elif report.failed:
                outcome = "broken"
            elif report.when == "call":
                outcome = "missing" if item.nodeid in _MISSING else "held"
        if outcome is not None:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({**described, "outcome": outcome, "test": item.nodeid}))
                handle.write("\n")
    return report
