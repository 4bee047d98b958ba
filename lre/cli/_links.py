"""The repositories lre pointed at itself, kept in ``{state_dir}/repos.json``.

``lre up`` and ``lre link`` add a repository (with how its client config was
written); ``lre down`` makes each one's client config inert, and the next
``lre up`` points each one back at the new server. ``lre unlink`` forgets a
repository. The file is a JSON object ``{"/abs/repo": {"instance": "main",
"edit_bazelrc": true, "buck_local": false}}`` written atomically; an
unreadable file counts as empty (lre then only knows the current repository).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from lre.cli._state_file import write_state_file

LINKS_FILE = "repos.json"


@dataclass(frozen=True, slots=True)
class Link:
    """How one repository's client config is written."""

    instance: str = "main"
    edit_bazelrc: bool = True
    buck_local: bool = False


def read_links(state_dir: Path) -> dict[Path, Link]:
    """Every recorded repository; {} when the file is missing or unreadable."""
    try:
        raw = json.loads((state_dir / LINKS_FILE).read_text(encoding="utf-8"))
        return {Path(repo): Link(**fields) for repo, fields in raw.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def _write_links(state_dir: Path, links: dict[Path, Link]) -> None:
    recorded = {str(repo): asdict(link) for repo, link in sorted(links.items())}
    write_state_file(state_dir, LINKS_FILE, json.dumps(recorded, indent=1))


def record_link(state_dir: Path, repo: Path, link: Link) -> None:
    """Remember ``repo`` (replacing what was recorded for it). Raises OSError."""
    links = read_links(state_dir)
    links[repo.resolve()] = link
    _write_links(state_dir, links)


def forget_link(state_dir: Path, repo: Path) -> None:
    """Forget ``repo``; nothing happens when it was not recorded. Raises OSError."""
    links = read_links(state_dir)
    if links.pop(repo.resolve(), None) is not None:
        _write_links(state_dir, links)
