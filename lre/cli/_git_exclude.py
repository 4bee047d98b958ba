"""Keep the files lre writes in a repository out of ``git status``.

They are listed in the repository's ``.git/info/exclude`` (local to the
clone, never committed), between two marker lines, so that they can be
replaced or removed without touching what the user listed there. A
tracked ``.gitignore`` is never edited.

Git itself says where that file is (``git rev-parse --git-path``), which
also covers worktrees and ``GIT_DIR``. When git is not installed or the
directory is not in a git work tree, nothing happens.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

BEGIN = "# >>> lre: files `lre up` wrote (`lre unlink` removes them and these lines) >>>"
END = "# <<< lre <<<"


def _git(repo: Path, *args: str) -> str | None:
    git = shutil.which("git")
    if git is None or not repo.is_dir():
        return None
    try:
        out = subprocess.run(
            [git, "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def is_tracked(repo: Path, name: str) -> bool:
    """Whether git tracks ``repo/name`` (False outside a work tree or without git)."""
    return _git(repo, "ls-files", "--error-unmatch", "--", name) is not None


def exclude_file(repo: Path) -> tuple[Path, Path] | None:
    """``(work tree top, info/exclude path)`` of the git work tree holding ``repo``.

    None when ``repo`` is not inside a git work tree (or git is missing).
    """
    top = _git(repo, "rev-parse", "--show-toplevel")
    path = _git(repo, "rev-parse", "--git-path", "info/exclude")
    if not top or not path:
        return None
    exclude = Path(path)
    if not exclude.is_absolute():
        exclude = repo / exclude
    return Path(top).resolve(), exclude


def _split_block(lines: list[str]) -> tuple[list[str], list[str]]:
    """(the lines outside lre's block, the patterns inside it)."""
    outside: list[str] = []
    inside_lines: list[str] = []
    inside = False
    for line in lines:
        if line == BEGIN:
            inside = True
        elif inside and line == END:
            inside = False
        elif inside:
            inside_lines.append(line)
        else:
            outside.append(line)
    return outside, inside_lines


def set_excluded(repo: Path, paths: Iterable[Path]) -> Path | None:
    """Make ``paths`` lre's entries for ``repo`` in the git exclude file.

    Entries lre made for other directories of the same work tree stay; an
    empty ``paths`` removes ``repo``'s (and the block once it is empty).
    Returns the exclude file when it changed, else None. Paths outside the
    work tree are ignored; OSError from writing the file propagates.
    """
    found = exclude_file(repo)
    if found is None:
        return None
    top, exclude = found
    prefix = "/" + repo.resolve().relative_to(top).as_posix().strip(".").strip("/")
    prefix = prefix.rstrip("/") + "/"
    patterns: list[str] = []
    for path in paths:
        try:
            relative = path.resolve().relative_to(top)
        except ValueError:
            continue
        patterns.append("/" + relative.as_posix() + ("/" if path.is_dir() else ""))
    old = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
    lines, earlier = _split_block(old.splitlines())
    patterns += [p for p in earlier if not p.startswith(prefix)]
    while lines and not lines[-1].strip():
        lines.pop()
    if patterns:
        block = [BEGIN, *sorted(set(patterns)), END]
        lines += ["", *block] if lines else block
    new = "\n".join(lines) + "\n" if lines else ""
    if new == old:
        return None
    exclude.parent.mkdir(parents=True, exist_ok=True)
    exclude.write_text(new, encoding="utf-8")
    return exclude
