"""What the user's Bazel and Buck2 must do after ``lre cache gc --force`` or
``lre cache clean --force`` deleted blobs lre had told them exist.

It depends on the client, so the text is worked out for the Bazel on PATH
and the repository the command runs in:

- Bazel 6.2 and later rerun a build whose remote blobs went
  (``--experimental_remote_cache_eviction_retries``: lre's config sets it
  before 8, Bazel's default from 8): nothing to do.
- An older Bazel that downloads every output (what lre's config makes it do)
  uploads or reruns what is missing by itself: nothing to do.
- An older Bazel whose repository's own bazelrc builds without the bytes
  (``--remote_download_toplevel``/``_minimal``) keeps references to outputs
  it never downloaded for its server's whole life and fails until
  ``bazel clean`` (4.2.3: "N errors during bulk transfer", exit 34).
- Buck2 remembers outputs it did not download beyond its daemon's life
  (facebook/buck2#862), so ``buck2 clean``.

Failure: none. Without a Bazel on PATH the rule for each version is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

#: The first Bazel that reruns a build whose remote blobs went.
RETRIES_FROM = (6, 2, 0)
#: The first Bazel that does so by default (lre's config sets it before).
RETRIES_DEFAULT_FROM = (8, 0, 0)


def after_force_steps(
    repo: Path | None, bazel: tuple[int, int, int] | None, without_bytes: Sequence[str]
) -> str:
    """The lines to print: one per client. ``repo``: the repository the
    command ran in (None: none); ``bazel``: the installed Bazel's version
    (None: not found); ``without_bytes``: the ``file:line`` of each line of
    the repository's own bazelrc that builds without the bytes."""
    return "\n".join(
        [
            "blobs lre had told clients exist were deleted (--force). What each client must do:",
            "  - " + _bazel_step(repo, bazel, without_bytes),
            "  - Buck2: run `buck2 clean` in each repository that builds through lre (Buck2 "
            "keeps references to outputs it did not download, even across `buck2 kill`).",
        ]
    )


def _bazel_step(
    repo: Path | None, bazel: tuple[int, int, int] | None, without_bytes: Sequence[str]
) -> str:
    if bazel is None:
        return (
            "Bazel (none found on PATH): a Bazel before 6.2 must run `bazel clean` in each "
            "repository whose own bazelrc builds without the bytes (--remote_download_toplevel "
            "or _minimal) before its next build; otherwise nothing: before 6.2 lre's config "
            "downloads every output, and 6.2 and later rerun the build by themselves."
        )
    name = "Bazel " + ".".join(map(str, bazel))
    if bazel >= RETRIES_FROM:
        how = (
            "lre's config sets it"
            if bazel < RETRIES_DEFAULT_FROM
            else "on by default since Bazel 8"
        )
        return (
            f"{name}: nothing; it reruns the build by itself when a blob it relied on is "
            f"gone (--experimental_remote_cache_eviction_retries, {how})."
        )
    if without_bytes:
        where = f" in {repo}" if repo is not None else ""
        return (
            f"{name}: run `bazel clean`{where} before the next build: "
            f"{', '.join(without_bytes)} builds without the bytes, and this Bazel fails on an "
            "output it never downloaded once that is gone ('N errors during bulk transfer', "
            "exit 34) until then."
        )
    return (
        f"{name}: nothing; with lre's config it downloads every output, so its next build "
        "uploads or reruns what is missing."
    )


def after_force_steps_here(cwd: Path) -> str:
    """``after_force_steps`` for the repository at or above ``cwd`` and the
    Bazel on PATH (``bazel --version`` starts no Bazel server)."""
    from lre.cli._bazel_client import detect_bazel_version
    from lre.cli._client_config import find_repo_root
    from lre.cli._doctor_cache import without_the_bytes

    repo = find_repo_root(cwd)
    lines = without_the_bytes(repo) if repo is not None else []
    return after_force_steps(repo, detect_bazel_version(), lines)
