"""Writing one of lre's own files in its state dir: private and whole."""

from __future__ import annotations

import os
from pathlib import Path


def write_state_file(state_dir: Path, name: str, text: str) -> None:
    """Replace ``state_dir/name`` with ``text`` atomically (a 0600 file
    renamed over it; ``state_dir`` made 0700 where missing), so a reader
    sees the old file or the new one, never part of it. Raises OSError."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = state_dir / (name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, state_dir / name)
