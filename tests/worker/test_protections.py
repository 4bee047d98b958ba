"""What lre says is missing where the kernel refuses namespaces, and
``containment: "strict"`` refusing to start there. The refusal is real: the
check runs inside a user namespace whose ``user.max_user_namespaces`` is 0,
with every capability dropped (``tests/_support/lre_as.refusing_namespaces``),
as lre's own user and as nobody."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lre.worker import missing_protections, namespace_refusals
from tests._support.lre_as import IDENTITIES, python_for, refusing_namespaces

CHOOSE = (
    "import sys\n"
    "from lre.worker import ContainmentUnavailable, choose_containment\n"
    "try:\n"
    "    print(choose_containment(sys.argv[1]).name)\n"
    "except ContainmentUnavailable as error:\n"
    "    print('refused:', error)\n"
)


def choose_where_refused(identity: str, mode: str) -> str:
    prefix, env = python_for(identity)
    argv = [*prefix[:-1], *refusing_namespaces([prefix[-1], "-c", CHOOSE, mode])]
    done = subprocess.run(
        argv, env=env, cwd="/", capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_each_backend_names_what_it_lacks() -> None:
    assert missing_protections("pidns") == ()
    assert any("PID namespace" in text for text in missing_protections("portable"))
    assert any("block-network" in text for text in missing_protections("userns"))


def test_kernel_settings_that_refuse_namespaces_are_named(tmp_path: Path) -> None:
    settings = tmp_path / "proc" / "sys"
    (settings / "kernel").mkdir(parents=True)
    (settings / "user").mkdir()
    (settings / "kernel" / "apparmor_restrict_unprivileged_userns").write_text("1\n")
    (settings / "kernel" / "unprivileged_userns_clone").write_text("1\n")  # allows
    (settings / "user" / "max_user_namespaces").write_text("15000\n")
    refusals = namespace_refusals(tmp_path)
    assert len(refusals) == 1
    assert refusals[0].startswith("kernel.apparmor_restrict_unprivileged_userns = 1")
    (settings / "kernel" / "unprivileged_userns_clone").write_text("0\n")
    assert len(namespace_refusals(tmp_path)) == 2


@pytest.mark.attack("kernel refuses namespaces: strict refuses to start")
@pytest.mark.parametrize("identity", IDENTITIES)
def test_strict_refuses_to_start_where_the_kernel_refuses_namespaces(identity: str) -> None:
    answer = choose_where_refused(identity, "strict")
    assert answer.startswith("refused: 'strict' needs a PID namespace"), answer
    assert "user.max_user_namespaces = 0" in answer, answer
    # strongest runs there, with the sweep, and says what is missing
    assert choose_where_refused(identity, "strongest") == "portable"
