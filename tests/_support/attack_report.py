"""The ``attack`` marker, its results file, and docs/security.md's table made from it.

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

The table of attack class by backend, lre's user and ``action_user``:

    LRE_ATTACK_RESULTS=/tmp/attacks.jsonl python -m pytest -m attack tests/
    python -m tests._support.attack_report /tmp/attacks.jsonl --write docs/security.md

A column is one backend, the user lre ran as and ``action_user`` (a record
without one ran with ``root``). A cell is ``held`` when every test of that
class and column passed, ``BROKEN`` when one failed, ``not held`` when a test
found the attack work where that setup is known not to stop it (``missing``),
``skipped`` when all were skipped, and empty when none ran. ``--write``
replaces the text between the markers ``BEGIN`` and ``END`` and fails (exit 1,
the file untouched) when they are missing; without it the table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

RESULTS_VARIABLE = "LRE_ATTACK_RESULTS"
BEGIN = "<!-- attack-table:begin -->"
END = "<!-- attack-table:end -->"
_BACKENDS = ("pidns", "userns", "portable", "-")
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


def _column_order(column: tuple[str, str, str]) -> tuple[int, bool, str, bool, str]:
    """Backends strongest first; per backend, root as lre's user first, then
    the default action user (root) first."""
    backend, identity, action_user = column
    rank = _BACKENDS.index(backend) if backend in _BACKENDS else len(_BACKENDS)
    return rank, identity != "root", identity, action_user != "root", action_user


def _heading(column: tuple[str, str, str]) -> str:
    backend, identity, action_user = column
    where = f"{backend} as {identity}" if backend != "-" else f"as {identity}"
    return f"{where}, action_user {action_user}"


def _cell(seen: list[str]) -> str:
    if not seen:
        return ""
    if "broken" in seen:
        return "**BROKEN**"
    if "missing" in seen:
        return "not held"
    return "held" if "held" in seen else "skipped"


def render(records: list[dict[str, str]]) -> str:
    """The markdown table for ``records`` (each as this plugin writes it)."""
    outcomes: dict[tuple[str, tuple[str, str, str]], list[str]] = defaultdict(list)
    for record in records:
        column = (record["backend"], record["identity"], record.get("action_user", "root"))
        outcomes[(record["attack"], column)].append(record["outcome"])
    attacks = sorted({attack for attack, _ in outcomes})
    columns = sorted({column for _, column in outcomes}, key=_column_order)
    heading = ["attack class", *(_heading(column) for column in columns)]
    lines = [
        "Generated by `python -m tests._support.attack_report` from "
        f"{len(records)} attack-test results; do not edit by hand.",
        "",
        "| " + " | ".join(heading) + " |",
        "|" + "---|" * len(heading),
    ]
    for attack in attacks:
        cells = [_cell(outcomes.get((attack, column), [])) for column in columns]
        lines.append("| " + " | ".join([attack, *cells]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="docs/security.md's attack table")
    parser.add_argument("results", type=Path)
    parser.add_argument("--write", type=Path, help="a markdown file with the markers")
    args = parser.parse_args(argv)
    records = [json.loads(line) for line in args.results.read_text().splitlines() if line.strip()]
    if not records:
        print(f"{args.results}: no attack-test results", file=sys.stderr)
        return 1
    table = render(records)
    if args.write is None:
        sys.stdout.write(table)
        return 0
    text = args.write.read_text()
    if BEGIN not in text or END not in text:
        print(f"{args.write}: no {BEGIN} ... {END} markers", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    args.write.write_text(f"{head}{BEGIN}\n{table}{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
