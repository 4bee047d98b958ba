"""What `lre cache gc --force` / `clean --force` tell the user to do: the
steps for the Bazel found and the repository's own flags, not a fixed text."""

from __future__ import annotations

from pathlib import Path

from lre.cli._force_steps import after_force_steps


def test_an_old_bazel_building_without_the_bytes_must_clean(tmp_path: Path) -> None:
    text = after_force_steps(tmp_path, (4, 2, 3), [f"{tmp_path}/.bazelrc:2"])
    assert f"`bazel clean` in {tmp_path}" in text
    assert f"{tmp_path}/.bazelrc:2" in text  # the line that makes it necessary
    assert "Bazel 4.2.3" in text


def test_an_old_bazel_downloading_every_output_needs_nothing(tmp_path: Path) -> None:
    text = after_force_steps(tmp_path, (5, 4, 1), [])
    bazel = next(line for line in text.splitlines() if "Bazel 5.4.1" in line)
    assert "nothing" in bazel and "bazel clean" not in bazel, text


def test_a_bazel_that_retries_needs_nothing_even_without_the_bytes(tmp_path: Path) -> None:
    for version in ((6, 2, 0), (7, 4, 1), (8, 1, 0)):
        text = after_force_steps(tmp_path, version, [f"{tmp_path}/.bazelrc:1"])
        bazel = next(line for line in text.splitlines() if "Bazel " in line)
        assert "nothing" in bazel and "bazel clean" not in bazel, text
        assert "4.2.3" not in text
        assert "reruns the build" in text


def test_no_bazel_found_gives_the_rule_by_version_and_buck2_always_cleans() -> None:
    text = after_force_steps(None, None, [])
    assert "before 6.2" in text and "`bazel clean`" in text
    assert "`buck2 clean`" in text  # its daemon's state outlives `buck2 kill`
