"""``error_for_code``: a status received from an upstream becomes the class
that carries that code."""

from __future__ import annotations

import pytest

from lre.errors import (
    CacheMiss,
    Internal,
    LreError,
    MissingBlobs,
    NotFound,
    StatusCode,
    error_for_code,
)

_NO_CLASS = {StatusCode.OK, StatusCode.UNKNOWN, StatusCode.DATA_LOSS}


@pytest.mark.parametrize("code", [c for c in StatusCode if c not in _NO_CLASS])
def test_each_code_becomes_the_class_carrying_it(code: StatusCode) -> None:
    error = error_for_code(int(code), "upstream said so")
    assert error.code == code
    assert error.message == "upstream said so"
    assert type(error).__bases__ == (LreError,)


@pytest.mark.parametrize("code", [*_NO_CLASS, 99])
def test_a_code_no_class_carries_is_internal(code: int) -> None:
    assert type(error_for_code(code, "odd")) is Internal


def test_refinements_are_never_the_answer() -> None:
    assert type(error_for_code(StatusCode.NOT_FOUND, "gone")) is NotFound
    assert not isinstance(error_for_code(StatusCode.NOT_FOUND, "gone"), CacheMiss)
    assert not isinstance(error_for_code(StatusCode.FAILED_PRECONDITION, "x"), MissingBlobs)
