"""Input symlinks are judged by where the kernel would resolve them."""

from __future__ import annotations

import pytest

from lre.digest import digest_of
from lre.errors import InvalidArgument
from lre.worker.inputs._input_tree import InputFile, InputSymlink, InputTree, check_symlinks_resolve


def tree(
    links: dict[str, str], dirs: tuple[str, ...] = (), files: tuple[str, ...] = ()
) -> InputTree:
    return InputTree(
        directories=list(dirs),
        files=[InputFile(path, digest_of(b""), False) for path in files],
        symlinks=[InputSymlink(path, target) for path, target in links.items()],
    )


@pytest.mark.parametrize(
    "links, dirs",
    [
        ({"d/up": "..", "s": "d/up/.."}, ("d",)),  # a link followed by ..
        ({"d/up": "..", "s": "d/up/d/up/d/up/../../x"}, ("d",)),  # balanced as text
        ({"l1": "l2", "l2": "d/up/..", "d/up": ".."}, ("d",)),  # a chain
        ({"l1": "d/abs", "d/abs": "/etc"}, ("d",)),  # a link to an absolute link
        ({"d/e/up2": "../..", "s": "d/e/up2/.."}, ("d", "d/e")),
    ],
)
def test_escaping_resolutions_are_refused(links: dict[str, str], dirs: tuple[str, ...]) -> None:
    with pytest.raises(InvalidArgument, match="resolves outside the input root"):
        check_symlinks_resolve(tree(links, dirs))


@pytest.mark.parametrize(
    "links, dirs, files",
    [
        ({"d/up": "..", "s": "d/up/d"}, ("d",), ()),  # stays at the root
        ({"a": "b", "b": "a"}, (), ()),  # a loop: the kernel refuses it (ELOOP)
        ({"s": "f/../.."}, (), ("f",)),  # through a file: ENOTDIR, not an escape
        ({"s": "missing/x"}, (), ()),  # dangling inside: the action may make it
        ({"d/l": "../d/f"}, ("d",), ("d/f",)),
    ],
)
def test_resolutions_that_stay_inside_pass(
    links: dict[str, str], dirs: tuple[str, ...], files: tuple[str, ...]
) -> None:
    check_symlinks_resolve(tree(links, dirs, files))


def test_text_after_a_missing_component_still_counts() -> None:
    with pytest.raises(InvalidArgument):
        check_symlinks_resolve(tree({"s": "missing/../../x"}))
