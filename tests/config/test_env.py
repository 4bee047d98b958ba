import pytest

from lre.config._env import ExpansionError, escape_env, expand_env

ENV = {"HOME": "/home/dev", "EMPTY": "", "PORT": "50051", "DOLLAR": "a$b${X}"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain", "plain"),
        ("${HOME}/.cache", "/home/dev/.cache"),
        ("127.0.0.1:${PORT}", "127.0.0.1:50051"),
        ("${UNSET:-fallback}", "fallback"),
        ("${EMPTY:-fallback}", "fallback"),
        ("${EMPTY}", ""),
        ("${PORT:-1}", "50051"),
        ("${UNSET:-}", ""),
        ("${A:-${B:-${HOME}/x}}/y", "/home/dev/x/y"),
        ("${HOME:-${UNSET}}", "/home/dev"),  # an unused default is not evaluated
        ("$$HOME", "$HOME"),
        ("$${HOME}", "${HOME}"),
        ("cost: 5$", "cost: 5$"),
        ("$1 $x", "$1 $x"),
        ("${DOLLAR}", "a$b${X}"),  # expanded text is not expanded again
    ],
)
def test_expansion(text: str, expected: str) -> None:
    assert expand_env(text, ENV) == expected


def test_unset_variable_names_it() -> None:
    with pytest.raises(ExpansionError, match="LRE_NOPE is not set"):
        expand_env("${LRE_NOPE}/x", ENV)


def test_unset_variable_inside_used_default() -> None:
    with pytest.raises(ExpansionError, match="INNER is not set"):
        expand_env("${OUTER:-${INNER}}", ENV)


@pytest.mark.parametrize("text", ["${HOME", "${", "${1X}", "${HOME:x}", "${A:-b", "${A-b}"])
def test_malformed(text: str) -> None:
    with pytest.raises(ExpansionError):
        expand_env(text, ENV)


@pytest.mark.parametrize("text", ["a$b", "${HOME}", "$$", "plain", "x}"])
def test_escape_round_trips(text: str) -> None:
    assert expand_env(escape_env(text), {}) == text
