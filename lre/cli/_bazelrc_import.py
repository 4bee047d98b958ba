"""Where Bazel is told to read ``lre.bazelrc``, without lre editing a tracked file.

Bazel reads ``lre.bazelrc`` only through a ``try-import`` (or ``import``)
line. ``import_target`` picks the file that line goes into, first match:

1. none when the repository's ``.bazelrc`` already imports ``lre.bazelrc``
   (the user's own line, ``import`` or ``try-import``, counts), or imports a
   ``user.bazelrc`` that does;
2. ``user.bazelrc`` when ``.bazelrc`` imports it (the common convention for
   a per-user file) and git does not track it;
3. ``.bazelrc`` itself when git does not track it and it is no symlink;
4. else the user's own ``~/.bazelrc`` (one line serving every repository;
   ``try-import`` skips a workspace without ``lre.bazelrc``).

The line goes in under lre's comment, so ``remove_import`` takes out
exactly those lines and leaves the file byte for byte as it was (a file
that ended without a newline gets a comment saying so, and loses the
newline again; a file lre created is deleted when nothing else is in it).
"""

from __future__ import annotations

from pathlib import Path

from lre.cli._client_files import WriteReport, read_or_empty
from lre.cli._git_exclude import is_tracked

TRY_IMPORT = "try-import %workspace%/lre.bazelrc"
BAZELRC_COMMENT = "# Added by `lre up`: use lre for remote execution (`lre unlink` removes it)."
#: The comment when the file's last line had no newline: removal drops it again.
BAZELRC_COMMENT_NO_EOL = (
    "# Added by `lre up` after a last line without a newline: use lre for remote "
    "execution (`lre unlink` removes it)."
)
USER_BAZELRC = "user.bazelrc"


def imports(text: str, name: str) -> bool:
    """Whether bazelrc ``text`` has an active ``import``/``try-import`` of
    ``%workspace%/name``."""
    for line in text.splitlines():
        words = line.split()
        if (
            len(words) == 2
            and words[0] in ("import", "try-import")
            and words[1] in (f"%workspace%/{name}", name)
        ):
            return True
    return False


def import_target(repo: Path, home: Path) -> tuple[Path | None, str]:
    """(the file to add ``TRY_IMPORT`` to, why that one: "" for ``.bazelrc``);
    None when Bazel already reads ``lre.bazelrc``. See the module docstring."""
    bazelrc = repo / ".bazelrc"
    text = read_or_empty(bazelrc)
    if imports(text, "lre.bazelrc"):
        return None, ""
    user = repo / USER_BAZELRC
    if imports(text, USER_BAZELRC):
        if imports(read_or_empty(user), "lre.bazelrc"):
            return None, ""
        if not user.is_symlink() and not is_tracked(repo, USER_BAZELRC):
            return user, f"{bazelrc} imports {USER_BAZELRC}, which git does not track"
    tracked = is_tracked(repo, ".bazelrc")
    if not bazelrc.is_symlink() and not tracked:
        return bazelrc, ""
    home_rc = home / ".bazelrc"
    if imports(read_or_empty(home_rc), "lre.bazelrc"):
        return None, ""
    why = "is tracked by git" if tracked else "is a symlink"
    return home_rc, f"{bazelrc} {why}, so lre leaves it alone and uses your own {home_rc}"


def importer(repo: Path, home: Path) -> Path | None:
    """The file through which Bazel reads ``repo``'s ``lre.bazelrc`` (None: none)."""
    bazelrc = repo / ".bazelrc"
    text = read_or_empty(bazelrc)
    if imports(text, "lre.bazelrc"):
        return bazelrc
    if imports(text, USER_BAZELRC) and imports(read_or_empty(repo / USER_BAZELRC), "lre.bazelrc"):
        return repo / USER_BAZELRC
    home_rc = home / ".bazelrc"
    return home_rc if imports(read_or_empty(home_rc), "lre.bazelrc") else None


def add_import(path: Path) -> None:
    """Append lre's comment and ``TRY_IMPORT`` to ``path`` (created if missing).
    Raises ``OSError``."""
    existing = path.read_bytes().decode("utf-8") if path.exists() else ""
    if existing and not existing.endswith("\n"):
        block = "\n" + BAZELRC_COMMENT_NO_EOL + "\n" + TRY_IMPORT + "\n"
    else:
        block = BAZELRC_COMMENT + "\n" + TRY_IMPORT + "\n"
    with path.open("a", encoding="utf-8") as f:
        f.write(block)


def without_lre_import(lines: list[str]) -> list[str]:
    """``lines`` (with their ends) without lre's comment and the import under it.

    A try-import line not under lre's comment was written by the user and
    stays. Under the no-newline comment the line before it loses its newline.
    """
    kept: list[str] = []
    index = 0
    while index < len(lines):
        text = lines[index].rstrip("\n")
        follows = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if text in (BAZELRC_COMMENT, BAZELRC_COMMENT_NO_EOL) and follows == TRY_IMPORT:
            if text == BAZELRC_COMMENT_NO_EOL and kept and kept[-1].endswith("\n"):
                kept[-1] = kept[-1][:-1]
            index += 2
            continue
        kept.append(lines[index])
        index += 1
    return kept


def remove_import_into(path: Path, report: WriteReport) -> None:
    """``remove_import`` of ``path``, noted in ``report`` (removed, or cleaned
    when other lines stay). Raises ``OSError``."""
    done = remove_import(path)
    if done == "deleted":
        report.removed.append(path)
    elif done == "edited":
        report.cleaned.append(path)


def remove_import(path: Path) -> str:
    """Take lre's lines out of ``path``: "deleted" when nothing else was in it
    (lre created it), "edited" when other lines stay, "" when it had none.
    Raises ``OSError``."""
    if path.is_symlink() or not path.is_file():
        return ""
    lines = path.read_bytes().decode("utf-8").splitlines(keepends=True)
    kept = without_lre_import(lines)
    if kept == lines:
        return ""
    if not kept:
        path.unlink()
        return "deleted"
    path.write_bytes("".join(kept).encode("utf-8"))
    return "edited"


def only_lre_lines(path: Path) -> bool:
    """Whether ``path`` holds lre's import lines and nothing else (lre created it)."""
    if path.is_symlink() or not path.is_file():
        return False
    lines = read_or_empty(path).splitlines(keepends=True)
    return bool(lines) and not "".join(without_lre_import(lines)).strip()


#: The line of ``lre.bazelrc`` that makes lre the default; a user who deletes
#: it makes lre opt-in (``bazel build --config=lre``), and lre keeps it so.
DEFAULT_ON = "build --config=lre"
OPT_IN_KEPT = (
    "# Opt-in here: the `build --config=lre` line was deleted, and `lre up` leaves it out."
)


def opted_in(text: str) -> bool:
    """Whether an ``lre.bazelrc`` (lre's, live or inert) says the user made lre
    opt-in: live flags without ``DEFAULT_ON``, or the ``OPT_IN_KEPT`` note."""
    lines = [line.strip() for line in text.splitlines()]
    if OPT_IN_KEPT in lines:
        return True
    live = any(line.startswith("build:lre ") for line in lines)
    return live and DEFAULT_ON not in lines


def without_default_on(text: str) -> str:
    """``text`` (a freshly generated ``lre.bazelrc``) with ``DEFAULT_ON`` and
    the comment right above it replaced by ``OPT_IN_KEPT``."""
    lines = text.split("\n")
    out: list[str] = []
    for line in lines:
        if line.strip() == DEFAULT_ON:
            if out and out[-1].startswith("#"):
                out.pop()
            out.append(OPT_IN_KEPT)
            continue
        out.append(line)
    return "\n".join(out)
