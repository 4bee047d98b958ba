"""Collecting outputs: names, tree limits and the output budget, all judged
before a byte is read."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lre.errors import InvalidArgument, ResourceExhausted
from lre.proto import re_pb2
from lre.worker.outputs import _outputs
from lre.worker.outputs._limits import ActionLimits
from lre.worker.outputs._output_checks import OutputBudget
from lre.worker.outputs._outputs import OutputRequest, log_file, scan_outputs
from lre.worker.view._view import OverlayXattrs


def _scan(root: Path, names: list[str], limits: ActionLimits) -> _outputs.FoundOutputs:
    requests = [OutputRequest(name, name, "path") for name in names]
    return scan_outputs(root, requests, allow_escaping_symlinks=False, budget=OutputBudget(limits))


def test_an_output_directory_over_the_entry_limit_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    for index in range(30):
        (tmp_path / "out" / f"f{index}").write_bytes(b"x")
    with pytest.raises(InvalidArgument, match=r"limits\.max_tree_entries \(20\)"):
        _scan(tmp_path, ["out"], ActionLimits(max_tree_entries=20))


def test_an_output_directory_over_the_directory_limit_is_refused(tmp_path: Path) -> None:
    for index in range(10):
        (tmp_path / "out" / f"d{index}").mkdir(parents=True)
    with pytest.raises(InvalidArgument, match=r"limits\.max_tree_directories \(5\)"):
        _scan(tmp_path, ["out"], ActionLimits(max_tree_directories=5))


def test_empty_directories_are_kept_in_the_tree(tmp_path: Path) -> None:
    (tmp_path / "out" / "a" / "empty").mkdir(parents=True)
    (tmp_path / "out" / "b").mkdir()
    (tmp_path / "out" / "a" / "f").write_bytes(b"f")
    found = _scan(tmp_path, ["out"], ActionLimits())
    ((_, tree_digest, _),) = found.directories
    tree = re_pb2.Tree.FromString(found.blobs[tree_digest])
    assert [d.name for d in tree.root.directories] == ["a", "b"]
    # "a" and the two empty directories, which are one message (deduplicated).
    assert sorted(len(c.directories) for c in tree.children) == [0, 1]


def test_a_sparse_giant_is_refused_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_reading(fd: int, expected: int | None = None) -> object:
        raise AssertionError("the file was read")

    with open(tmp_path / "big", "wb") as f:
        f.truncate(1 << 40)
    monkeypatch.setattr(_outputs, "hash_fd", no_reading)
    with pytest.raises(ResourceExhausted) as caught:
        _scan(tmp_path, ["big"], ActionLimits(max_output_bytes=1 << 30))
    assert "'big' is 1099511627776 bytes (0 allocated)" in caught.value.message
    assert "limits.max_output_bytes" in caught.value.message


def test_outputs_stdout_and_stderr_share_one_budget(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a" * 6000)
    (tmp_path / "stdout").write_bytes(b"s" * 6000)
    budget = OutputBudget(ActionLimits(max_output_bytes=10_000))
    scan_outputs(
        tmp_path, [OutputRequest("a", "a", "path")], allow_escaping_symlinks=False, budget=budget
    )
    info = os.stat(tmp_path / "stdout")
    with pytest.raises(ResourceExhausted, match="'stdout' is 6000 bytes"):
        log_file(tmp_path / "stdout", (info.st_dev, info.st_ino), budget)


def test_a_non_utf8_name_deep_in_an_output_directory_is_named_escaped(tmp_path: Path) -> None:
    (tmp_path / "out" / "sub").mkdir(parents=True)
    os.mkdir(os.fsencode(tmp_path / "out" / "sub") + b"/x\xe9y")
    with pytest.raises(InvalidArgument, match=r"output 'out/sub/x\\xe9y': its name is not"):
        _scan(tmp_path, ["out"], ActionLimits())


# --- outputs of an action that ran in a view: the overlay's layers merged again

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="whiteouts and trusted.overlay xattrs need root"
)


def _layers(tmp_path: Path) -> tuple[Path, Path]:
    upper, lower = tmp_path / "upper", tmp_path / "lower"
    (upper / "in").mkdir(parents=True)
    (lower / "in").mkdir(parents=True)
    return upper, lower


def _scan_layers(
    upper: Path, lower: Path, names: list[str], xattrs: OverlayXattrs = "trusted"
) -> _outputs.FoundOutputs:
    return scan_outputs(
        upper,
        [OutputRequest(name, name, "path") for name in names],
        allow_escaping_symlinks=False,
        lower=lower,
        xattrs=xattrs,
    )


#: Both namespaces an overlay's marks can be in; setting trusted.* needs
#: root, user.* only the file's owner (the userns backend's overlays).
XATTRS = [pytest.param("trusted", marks=needs_root), "user"]


def _tree_files(found: _outputs.FoundOutputs) -> dict[str, _outputs.FoundFile]:
    """The one output directory's files by their path in its Tree (checked
    against the Tree blob), each as found."""
    ((_, tree_digest, _),) = found.directories
    tree = re_pb2.Tree.FromString(found.blobs[tree_digest])
    children = {_outputs._blob(child)[0].hash: child for child in tree.children}
    in_tree: list[tuple[str, str]] = []
    stack = [("", tree.root)]
    while stack:
        prefix, directory = stack.pop()
        in_tree.extend((prefix + node.name, node.digest.hash) for node in directory.files)
        stack.extend((f"{prefix}{d.name}/", children[d.digest.hash]) for d in directory.directories)
    by_relative = {item.relative: item for item in found.tree_files}
    assert len(by_relative) == len(found.tree_files) == len(in_tree)
    files = {name: by_relative[f"in/{name}"] for name, _ in in_tree}
    assert all(files[name].digest.hash == digest for name, digest in in_tree)
    return files


def _from(found: _outputs.FoundFile, layer: Path) -> bool:
    """Whether ``found`` is read (and would be opened again) in ``layer``;
    a file of the lower layer (a CAS inode) is never movable."""
    assert found.root is not None and found.path == found.root / found.relative
    return found.root == layer and (layer.name == "upper" or not found.movable)


def test_an_untouched_input_named_as_an_output_file_is_read_from_the_lower_layer(
    tmp_path: Path,
) -> None:
    upper, lower = _layers(tmp_path)
    (lower / "in" / "tool").write_bytes(b"tool")
    ((name, item),) = _scan_layers(upper, lower, ["in/tool"]).files
    assert (name, item.data) == ("in/tool", b"tool")
    assert _from(item, lower) and not item.movable


def test_an_output_directory_only_in_the_lower_layer_comes_wholly_from_it(
    tmp_path: Path,
) -> None:
    upper, lower = _layers(tmp_path)
    (lower / "in" / "sub").mkdir()
    (lower / "in" / "f").write_bytes(b"f")
    (lower / "in" / "sub" / "g").write_bytes(b"g")
    (upper / "in").rmdir()
    files = _tree_files(_scan_layers(upper, lower, ["in"]))
    assert sorted(files) == ["f", "sub/g"]
    assert all(_from(item, lower) for item in files.values())
    assert files["sub/g"].data == b"g"


def test_a_directory_in_both_layers_shows_the_entries_of_both(tmp_path: Path) -> None:
    upper, lower = _layers(tmp_path)
    (lower / "in" / "sub").mkdir()
    (upper / "in" / "sub").mkdir()
    (lower / "in" / "f").write_bytes(b"old")
    (upper / "in" / "f").write_bytes(b"new")  # changed by the action: copied up
    (lower / "in" / "tool").write_bytes(b"tool")
    (lower / "in" / "sub" / "below").write_bytes(b"below")
    (upper / "in" / "sub" / "above").write_bytes(b"above")
    files = _tree_files(_scan_layers(upper, lower, ["in"]))
    assert {name: item.data for name, item in files.items()} == {
        "f": b"new",
        "tool": b"tool",
        "sub/above": b"above",
        "sub/below": b"below",
    }
    assert _from(files["f"], upper) and _from(files["sub/above"], upper)
    assert _from(files["tool"], lower) and _from(files["sub/below"], lower)


@needs_root
def test_a_whiteout_hides_the_lower_entry(tmp_path: Path) -> None:
    upper, lower = _layers(tmp_path)
    (lower / "in" / "f").write_bytes(b"f")
    (lower / "in" / "tool").write_bytes(b"tool")
    (lower / "in" / "gone").mkdir()
    os.mkdir(os.fsencode(lower / "in") + b"/x\xe9y")
    # What ``rm in/tool; rm -r in/gone in/x?y`` leaves. Hidden names are not
    # the action's: one that is not UTF-8 does not fail the output.
    for name in (b"tool", b"gone", b"x\xe9y"):
        os.mknod(os.fsencode(upper / "in") + b"/" + name, stat.S_IFCHR, 0)
    found = _scan_layers(upper, lower, ["in", "in/tool", "in/gone"])
    assert sorted(_tree_files(found)) == ["f"]
    assert not found.files
    ((_, tree_digest, _),) = found.directories
    assert not re_pb2.Tree.FromString(found.blobs[tree_digest]).root.directories


@pytest.mark.parametrize("xattrs", XATTRS)
def test_an_opaque_directory_hides_the_lower_one(tmp_path: Path, xattrs: OverlayXattrs) -> None:
    upper, lower = _layers(tmp_path)
    (lower / "in" / "sub").mkdir()
    (lower / "in" / "sub" / "old").write_bytes(b"old")
    (lower / "in" / "keep").write_bytes(b"keep")
    (upper / "in" / "sub").mkdir()  # ``rm -rf in/sub; mkdir in/sub``
    os.setxattr(upper / "in" / "sub", f"{xattrs}.overlay.opaque", b"y")
    (upper / "in" / "sub" / "new").write_bytes(b"new")
    files = _tree_files(_scan_layers(upper, lower, ["in"], xattrs))
    assert sorted(files) == ["keep", "sub/new"]
    assert _from(files["sub/new"], upper) and _from(files["keep"], lower)


@pytest.mark.parametrize("xattrs", XATTRS)
def test_marks_in_the_other_namespace_are_not_the_overlays(
    tmp_path: Path, xattrs: OverlayXattrs
) -> None:
    # An action under a trusted.* overlay can set user.overlay.opaque on a
    # directory of its own: only the namespace the overlay used counts.
    other: OverlayXattrs = "user" if xattrs == "trusted" else "trusted"
    upper, lower = _layers(tmp_path)
    (lower / "in" / "sub").mkdir()
    (lower / "in" / "sub" / "old").write_bytes(b"old")
    (upper / "in" / "sub").mkdir()
    os.setxattr(upper / "in" / "sub", f"{xattrs}.overlay.opaque", b"y")
    os.setxattr(upper / "in" / "sub", f"{xattrs}.overlay.redirect", b"/elsewhere")
    (upper / "in" / "sub" / "new").write_bytes(b"new")
    os.setxattr(upper / "in" / "sub" / "new", f"{xattrs}.overlay.metacopy", b"")
    files = _tree_files(_scan_layers(upper, lower, ["in", "in/sub/new"], other))
    assert sorted(files) == ["sub/new", "sub/old"]


def test_an_upper_file_hides_a_lower_directory(tmp_path: Path) -> None:
    upper, lower = _layers(tmp_path)
    (lower / "in" / "out").mkdir()
    (lower / "in" / "out" / "f").write_bytes(b"f")
    (upper / "in" / "out").write_bytes(b"file now")
    found = _scan_layers(upper, lower, ["in/out", "in"])
    ((name, item),) = found.files
    assert (name, item.data) == ("in/out", b"file now") and _from(item, upper)
    assert sorted(_tree_files(found)) == ["out"]


def test_an_upper_directory_hides_a_lower_file(tmp_path: Path) -> None:
    upper, lower = _layers(tmp_path)
    (lower / "in" / "out").write_bytes(b"was a file")
    (upper / "in" / "out").mkdir()
    (upper / "in" / "out" / "g").write_bytes(b"g")
    assert sorted(_tree_files(_scan_layers(upper, lower, ["in"]))) == ["out/g"]


def test_a_symlink_in_the_lower_layer_is_not_followed(tmp_path: Path) -> None:
    upper, lower = _layers(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret").write_bytes(b"secret")
    os.symlink(tmp_path / "elsewhere", lower / "in" / "link")
    (upper / "in").rmdir()
    with pytest.raises(InvalidArgument, match="replaced by a symlink"):
        _scan_layers(upper, lower, ["in/link/secret"])


@pytest.mark.parametrize("xattrs", XATTRS)
@pytest.mark.parametrize(("mark", "kind"), [("redirect", "dir"), ("metacopy", "file")])
def test_overlay_marks_lre_does_not_follow_are_refused(
    tmp_path: Path, mark: str, kind: str, xattrs: OverlayXattrs
) -> None:
    upper, lower = _layers(tmp_path)
    (lower / "in" / "x").mkdir()
    (lower / "in" / "x" / "f").write_bytes(b"f")
    marked = upper / "in" / "x"
    if kind == "dir":
        marked.mkdir()
    else:
        marked.write_bytes(b"")
    os.setxattr(marked, f"{xattrs}.overlay.{mark}", b"/elsewhere" if kind == "dir" else b"")
    with pytest.raises(InvalidArgument, match=r"output 'in/x'.*overlay"):
        _scan_layers(upper, lower, ["in" if kind == "dir" else "in/x"], xattrs)
