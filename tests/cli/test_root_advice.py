"""One recommendation about root, the same in the README, ``lre doctor`` (run
as root and as ``nobody``) and docs/security.md: your own user where
unprivileged user namespaces work, root only where they do not. And the
README says what lre is beside NativeLink's "Local Remote Execution"."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests._support.lre_as import python_for, scratch_for

ROOT = Path(__file__).parents[2]

#: The recommendation, as README and docs/security.md word it (spacing aside).
README_ADVICE = (
    "Run lre as your own user where the kernel allows unprivileged user namespaces "
    "(lre then contains actions with `userns`), as root only where it does not"
)
SECURITY_ADVICE = (
    "Run lre as your own user where unprivileged user namespaces work (`userns`), "
    "as root only where they do not"
)
#: How doctor words it (its user fix as root).
DOCTOR_ADVICE = (
    "run lre as your own user where unprivileged user namespaces work (containment "
    "userns); as root only where they do not"
)


def _flat(path: Path) -> str:
    return re.sub(r"\s+", " ", path.read_text())


def test_readme_and_security_doc_give_the_recommendation_and_the_name() -> None:
    readme = _flat(ROOT / "README.md")
    assert README_ADVICE in readme
    assert SECURITY_ADVICE in _flat(ROOT / "docs" / "security.md")
    # The name, in two sentences beside NativeLink's use of it.
    assert (
        'Not to be confused with NativeLink\'s "Local Remote Execution" (LRE): there the '
        "name means Nix-pinned toolchains that give local and remote builds the same "
        "action keys, not a server on your laptop. This lre is the server;"
    ) in readme


@pytest.mark.parametrize("identity", ["own", "nobody"])
def test_doctor_as_root_and_as_nobody_agrees_with_the_readme(identity: str) -> None:
    prefix, env = python_for(identity)
    with scratch_for(identity) as home:
        done = subprocess.run(
            [*prefix, "-m", "lre", "doctor", "--json"],
            cwd=home,
            env={**env, "HOME": str(home), "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert done.stdout, done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    root = identity == "own" and os.geteuid() == 0
    user = checks["user"]
    if root:
        assert user["status"] == "WARN", user
        assert user["fix"].startswith(DOCTOR_ADVICE), user
    else:
        assert user["status"] == "OK", user
    # No row tells anyone to start lre as root unless as the fallback the
    # recommendation names (where user namespaces are refused).
    for check in checks.values():
        fix = check.get("fix") or ""
        if "as root" in fix:
            assert DOCTOR_ADVICE in fix or "where you cannot, start lre as root" in fix, check
