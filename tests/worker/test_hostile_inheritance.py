"""Nothing of lre's is inherited: an action holds no descriptor of lre's, nor does
the guardian; each listed from inside a real action (tests/_support/lre_driver.py),
as lre's own user and as nobody, under each backend."""

from __future__ import annotations

import pytest

from tests._support.lre_as import each_setup, require_setup, run_driver, scratch_for

#: Every descriptor of the listing process, with its target.
LIST_OWN_FDS = (
    "ls -l /proc/self/fd/ > fds.txt; sed -n 's/.* \\([0-9][0-9]*\\) -> \\(.*\\)/\\1 \\2/p' fds.txt"
)


@pytest.mark.attack("inheritance: an action or the guardian holds lre's descriptors")
@each_setup()
def test_an_action_and_the_guardian_hold_no_descriptor_of_lres(
    containment: str, identity: str
) -> None:
    require_setup(containment, identity)
    with scratch_for(identity) as scratch:
        answer = run_driver(
            identity,
            {"mode": containment, "script": LIST_OWN_FDS, "then": "down", "leak": True},
            scratch,
        )
        listing, err = str(scratch / "fds.txt"), str(scratch / "err")
    held = dict(line.split(" ", 1) for line in str(answer["stdout"]).splitlines())
    # ls's own handle on the directory it lists is the only extra one, and
    # GNU time's report file, GNU time being the action's first process
    # (handed to it and its own open of it): the action's own figure,
    # parsed defensively (_tree_peak).
    report = {fd for fd, target in held.items() if target == "/memfd:lre-tree-peak (deleted)"}
    assert len(report) == 2, answer
    extra = {
        fd: target for fd, target in held.items() if not target.endswith("/fd") and fd not in report
    }
    assert extra == {"0": "/dev/null", "1": listing, "2": err}, answer
    guardian = answer["guardian_fds"]
    if identity == "nobody":
        # The guardian is not dumpable: even lre's own user cannot read its
        # descriptors (nor ptrace it, nor copy them with pidfd_getfd).
        assert guardian is None, guardian
    else:
        assert isinstance(guardian, dict)
        # Its own script may still be open while its interpreter starts.
        script = {fd for fd, target in guardian.items() if target.endswith("_guardian.py")}
        assert set(guardian) - script == {"0", "1", "2"}, guardian
        assert guardian["0"].startswith("socket:"), guardian
        assert guardian["1"] == guardian["2"] == "/dev/null", guardian
