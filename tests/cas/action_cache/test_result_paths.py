from __future__ import annotations

import pytest

from lre.cas.action_cache._result_paths import check_result_paths
from lre.errors import InvalidArgument
from lre.proto import re_pb2


def _result(**fields: object) -> re_pb2.ActionResult:
    return re_pb2.ActionResult(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (
            _result(output_files=[re_pb2.OutputFile(path="/etc/passwd")]),
            r"output_files\[0\].path: '/etc/passwd' is absolute",
        ),
        (
            _result(output_files=[re_pb2.OutputFile(path="a/../../b")]),
            r"output_files\[0\].path: 'a/../../b' has an empty",
        ),
        (
            _result(output_directories=[re_pb2.OutputDirectory(path="")]),
            r"output_directories\[0\].path: empty path",
        ),
        (
            _result(output_symlinks=[re_pb2.OutputSymlink(path="out/l", target="/home/me")]),
            r"output_symlinks\[0\].target: absolute symlink target '/home/me'",
        ),
        (
            _result(output_symlinks=[re_pb2.OutputSymlink(path="out/l", target="../../x")]),
            r"output_symlinks\[0\].target: symlink 'out/l' -> '../../x' leads outside",
        ),
        (
            _result(output_file_symlinks=[re_pb2.OutputSymlink(path="a//b", target="c")]),
            r"output_file_symlinks\[0\].path",
        ),
    ],
)
def test_poisoned_results_are_refused_naming_the_field(
    result: re_pb2.ActionResult, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        check_result_paths(result)


def test_clean_result_passes() -> None:
    check_result_paths(
        _result(
            output_files=[re_pb2.OutputFile(path="out/a.o")],
            output_directories=[re_pb2.OutputDirectory(path="out/dir")],
            output_symlinks=[re_pb2.OutputSymlink(path="out/dir/l", target="../a.o")],
        )
    )
