"""completion_kind: which completions counter an ended operation falls under."""

from __future__ import annotations

from lre.errors import Cancelled, DeadlineExceeded
from lre.proto import re_pb2
from lre.scheduler._statistics import completion_kind


def test_completion_kinds() -> None:
    ok = re_pb2.ActionResult(exit_code=0)
    failed = re_pb2.ActionResult(exit_code=2)
    assert completion_kind(result=ok, cached=False, error=None) == "success"
    assert completion_kind(result=failed, cached=False, error=None) == "nonzero_exit"
    assert completion_kind(result=ok, cached=True, error=None) == "cached"
    assert completion_kind(result=None, cached=False, error=Cancelled("x")) == "cancelled"
    # a timeout is an error even when it carries a (partial) result
    assert completion_kind(result=failed, cached=False, error=DeadlineExceeded("t")) == "error"
