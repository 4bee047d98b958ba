"""``action_user`` resolved at start-up (``resolve_action_user``), and the
app's error naming the field."""

from __future__ import annotations

import pwd

import pytest

from lre.worker import resolve_action_user

_NOBODY = pwd.getpwnam("nobody")


def test_unprivileged_is_nobody_for_a_root_lre_whose_actions_get_a_view() -> None:
    identity = resolve_action_user("unprivileged", viewed=True, euid=0)
    assert identity is not None
    assert (identity.uid, identity.gid) == (_NOBODY.pw_uid, _NOBODY.pw_gid)
    assert "--no-new-privs" in identity.prefix() and "--clear-groups" in identity.prefix()


@pytest.mark.parametrize(("euid", "viewed"), [(0, False), (1000, True), (1000, False)])
def test_unprivileged_is_lres_own_user_elsewhere(euid: int, viewed: bool) -> None:
    assert resolve_action_user("unprivileged", viewed=viewed, euid=euid) is None


@pytest.mark.parametrize("value", ["root", "0", "0:0"])
def test_root_is_the_opt_out(value: str) -> None:
    assert resolve_action_user(value, viewed=True, euid=0) is None


def test_a_uid_and_a_group_by_number_or_name() -> None:
    identity = resolve_action_user("nobody:0", viewed=True, euid=0)
    assert identity is not None and (identity.uid, identity.gid) == (_NOBODY.pw_uid, 0)
    numeric = resolve_action_user("12345", viewed=True, euid=0)
    assert numeric is not None and (numeric.uid, numeric.gid) == (12345, 12345)


@pytest.mark.parametrize(
    ("value", "euid", "viewed", "message"),
    [
        ("no-such-user-lre", 0, True, "no such user"),
        ("nobody:no-such-group-lre", 0, True, "no such group"),
        ("", 0, True, "names no user"),
        ("nobody", 1000, True, "only root"),
        ("nobody", 0, False, "only in a view"),
    ],
)
def test_a_value_that_cannot_work_says_why(
    value: str, euid: int, viewed: bool, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_action_user(value, viewed=viewed, euid=euid)


def test_a_non_root_lre_may_name_itself() -> None:
    own = pwd.getpwnam("nobody")
    assert resolve_action_user("nobody", viewed=True, euid=own.pw_uid) is None
