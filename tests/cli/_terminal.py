"""A program on a real terminal (a pty that is its controlling terminal), read by a thread."""

from __future__ import annotations

import fcntl
import os
import subprocess
import termios
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Terminal:
    """The master side of the pty a program runs on, read by a thread."""

    master: int
    process: subprocess.Popen[bytes]
    chunks: list[bytes] = field(default_factory=list)

    @property
    def output(self) -> str:
        return b"".join(self.chunks).decode("utf-8", "replace")

    def read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.chunks.append(data)


def controlling_tty() -> None:
    # After setsid (start_new_session): the pty on fd 0 becomes the session's terminal.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def start_on_terminal(
    args: Sequence[str], *, cwd: Path, env: dict[str, str]
) -> tuple[Terminal, threading.Thread]:
    """Start ``args`` on a new pty (its stdin, stdout, stderr and controlling
    terminal) and a thread reading what it writes."""
    master, slave = os.openpty()
    process = subprocess.Popen(
        list(args),
        cwd=cwd,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=controlling_tty,
    )
    os.close(slave)
    terminal = Terminal(master, process)
    reader = threading.Thread(target=terminal.read, daemon=True)
    reader.start()
    return terminal, reader
