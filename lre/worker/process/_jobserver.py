"""A private GNU make jobserver pool per running action, written with ``os`` only.

Every action that reserves N CPUs gets its own pool holding N - 1 tokens: each
jobserver client (make, cargo, rustc, gcc ``-flto=jobserver``, cmake --build,
ninja 1.13) runs one job on its implicit token and reads one more token per
extra job, so the action never runs more than N jobs at once. The pool is
discarded with the action: a client that was SIGKILLed while holding tokens
loses them inside its own action only, never in another one.

Two styles, as measured in ``shared/notes/jobserver.md``:

- ``pipe``: an anonymous pipe; the child inherits both ends (pass
  :attr:`JobserverPool.pass_fds` to ``subprocess``/``trio.run_process``) and
  finds them through ``MAKEFLAGS='-j --jobserver-fds=R,W --jobserver-auth=R,W'``,
  a string make 3.8x-4.4, cargo and gcc all accept.
- ``fifo``: a named pipe in the action's private directory, advertised as
  ``--jobserver-auth=fifo:PATH`` (make >= 4.4, ninja 1.13). make 4.3 rejects it.

Counting (:meth:`JobserverPool.in_use`, for the TUI) asks the kernel how many
bytes wait in the pipe (``FIONREAD`` through ``fcntl``/``termios`` of the
standard library) and never takes tokens out.

Lending (design (c) of the notes) is not implemented; :meth:`JobserverPool.lend`
and :meth:`JobserverPool.reclaim` are the primitives a broker would need, and
they keep :attr:`JobserverPool.expected_tokens` exact so leak counting stays
right if one is added.
"""

from __future__ import annotations

import array
import fcntl
import logging
import os
import stat
import termios
from collections.abc import Mapping
from typing import Literal

__all__ = ["JOBSERVER_ENV_VARS", "JobserverPool", "jobserver_tokens"]

log = logging.getLogger(__name__)

#: Variables through which a parent's parallelism could leak into an action;
#: removed from the action's environment before the pool's own are set.
JOBSERVER_ENV_VARS: tuple[str, ...] = (
    "MAKEFLAGS",
    "MFLAGS",
    "GNUMAKEFLAGS",
    "CARGO_MAKEFLAGS",
    "CMAKE_BUILD_PARALLEL_LEVEL",
)

_TOKEN = b"+"
_READ_CHUNK = 4096


def jobserver_tokens(millicpus: int) -> int:
    """Tokens for an action reserving ``millicpus`` thousandths of a CPU.

    Whole CPUs reserved minus the implicit one, rounded down so the action never
    runs more jobs than it reserved; an action reserving less than two CPUs gets
    an empty pool (one job at a time), not an unlimited ``-j``.
    """
    if millicpus < 0:
        raise ValueError(f"millicpus must be >= 0, got {millicpus}")
    return max(0, millicpus // 1000 - 1)


class JobserverPool:
    """One action's jobserver: ``tokens`` free tokens plus each client's implicit one.

    Create it before the action starts, give the child :meth:`environment` and
    :attr:`pass_fds`, and :meth:`close` it after the action's whole process group
    is gone. Use as a context manager to close it on every path.

    Failure: creating the pipe/fifo raises ``OSError`` (for example EMFILE when
    out of file descriptors); nothing is left open in that case.
    """

    def __init__(
        self,
        tokens: int,
        *,
        style: Literal["pipe", "fifo"] = "pipe",
        fifo_dir: str | None = None,
        name: str = "",
        owner: tuple[int, int] | None = None,
    ) -> None:
        # owner: (uid, gid) the fifo is given to (the user the action runs as).
        if tokens < 0:
            raise ValueError(f"jobserver tokens must be >= 0, got {tokens}")
        if style not in ("pipe", "fifo"):
            raise ValueError(f'jobserver style must be "pipe" or "fifo", got {style!r}')
        if style == "fifo" and not fifo_dir:
            raise ValueError("jobserver style fifo needs fifo_dir (the action's private directory)")
        self.style: Literal["pipe", "fifo"] = style
        self.name = name
        self._expected = 0
        self._closed = False
        self._fifo_path: str | None = None
        self._read_fd = -1
        self._write_fd = -1
        # The server's own open file description of the read end, non-blocking.
        # For pipes this is a second description of the same pipe (make may set
        # O_NONBLOCK on the one it shares with us and never clear it).
        self._server_fd = -1
        try:
            if style == "pipe":
                self._read_fd, self._write_fd = os.pipe()
                self._server_fd = os.open(
                    f"/proc/self/fd/{self._read_fd}", os.O_RDONLY | os.O_NONBLOCK
                )
            else:
                assert fifo_dir is not None
                path = os.path.join(fifo_dir, "jobserver.fifo")
                os.mkfifo(path, 0o600)
                self._fifo_path = path
                if owner is not None:
                    os.chown(path, *owner)
                # O_RDWR keeps a reader and a writer open, so clients' open() of
                # the path never blocks and reads never see end-of-file.
                self._server_fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
            self._put(tokens)
        except BaseException:
            self._release_fds()
            raise

    # ------------------------------------------------------------------ child side

    @property
    def expected_tokens(self) -> int:
        """Tokens that should be in the pipe once every client has returned its own."""
        return self._expected

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """File descriptors the child must inherit (empty for the fifo style)."""
        if self.style == "pipe":
            return (self._read_fd, self._write_fd)
        return ()

    @property
    def makeflags(self) -> str:
        """The ``MAKEFLAGS`` value that advertises this pool."""
        if self.style == "pipe":
            fds = f"{self._read_fd},{self._write_fd}"
            return f"-j --jobserver-fds={fds} --jobserver-auth={fds}"
        return f"-j --jobserver-auth=fifo:{self._fifo_path}"

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """A copy of ``base`` with inherited parallelism removed and this pool advertised.

        ``MAKEFLAGS``, ``MFLAGS``, ``GNUMAKEFLAGS``, ``CARGO_MAKEFLAGS`` and
        ``CMAKE_BUILD_PARALLEL_LEVEL`` are dropped; ``MAKEFLAGS`` and
        ``CARGO_MAKEFLAGS`` are set to :attr:`makeflags`.
        """
        self._check_open()
        env = {k: v for k, v in base.items() if k not in JOBSERVER_ENV_VARS}
        env["MAKEFLAGS"] = self.makeflags
        env["CARGO_MAKEFLAGS"] = self.makeflags
        return env

    @staticmethod
    def strip_environment(base: Mapping[str, str]) -> dict[str, str]:
        """A copy of ``base`` without any jobserver variable (for jobserver-less runs)."""
        return {k: v for k, v in base.items() if k not in JOBSERVER_ENV_VARS}

    # ------------------------------------------------------------------ server side

    def free_tokens(self) -> int:
        """Tokens currently in the pool (taken out and put back; for tests and the TUI)."""
        taken = self._take(None)
        self._write(taken)
        return taken

    def in_use(self) -> int:
        """Tokens held by clients now: expected minus those waiting in the pipe.

        Counted with ``FIONREAD`` (nothing is taken out, so clients are never
        starved by the count); 0 once closed. For the TUI.
        """
        if self._closed:
            return 0
        return max(0, self._expected - self._waiting())

    def drain_extra(self) -> int:
        """Take out tokens beyond the expected number; returns how many (logged).

        For a pool shared by several actions (the empty pool of one-CPU
        actions): a misbehaving client that writes tokens it never read
        would otherwise hand extra parallelism to the others. Call it after
        each action that used the pool ended.
        """
        self._check_open()
        extra = self._waiting() - self._expected
        if extra <= 0:
            return 0
        taken = self._take(extra)
        log.warning(
            "jobserver %s: %d token(s) more than were put in came back; removed",
            self.name or "pool",
            taken,
        )
        return taken

    def lend(self, count: int) -> None:
        """Add ``count`` tokens (a broker lending idle CPUs to this action)."""
        self._check_open()
        if count < 0:
            raise ValueError(f"lend count must be >= 0, got {count}")
        self._put(count)

    def reclaim(self, count: int) -> int:
        """Take back up to ``count`` free tokens; returns how many were taken.

        Only tokens not held by a client can be taken (reclaim is lazy).
        """
        self._check_open()
        if count < 0:
            raise ValueError(f"reclaim count must be >= 0, got {count}")
        taken = self._take(count)
        self._expected -= taken
        return taken

    def close(self) -> int:
        """Discard the pool; returns the number of tokens leaked by its clients.

        Call once every process of the action is gone. Leaked = expected - recovered;
        a leak (a client killed while holding tokens) is logged at warning level.
        More tokens than expected (a misbehaving client wrote extra) count as zero
        leaked and are logged. Closing twice returns 0 the second time.
        """
        if self._closed:
            return 0
        try:
            recovered = self._take(None)
        finally:
            self._release_fds()
        leaked = self._expected - recovered
        if leaked > 0:
            log.warning(
                "jobserver %s: %d of %d token(s) leaked (a client died holding them)",
                self.name or "pool",
                leaked,
                self._expected,
            )
        elif leaked < 0:
            log.warning(
                "jobserver %s: %d token(s) more than were put in came back",
                self.name or "pool",
                -leaked,
            )
        return max(0, leaked)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> JobserverPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self._release_fds()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"expected={self._expected}"
        return f"JobserverPool({self.style}, {state}, {self.makeflags if not self._closed else ''})"

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("jobserver pool is closed")

    def _put(self, count: int) -> None:
        self._write(count)
        self._expected += count

    def _write(self, count: int) -> None:
        fd = self._write_fd if self.style == "pipe" else self._server_fd
        data = _TOKEN * count
        while data:
            # A pipe holds 64 KiB by default, far above any CPU count; a short
            # write means the pipe is full, which is a bug in the caller.
            written = os.write(fd, data)
            data = data[written:]

    def _waiting(self) -> int:
        """Bytes (tokens) in the pipe now, without reading them."""
        buffer = array.array("i", [0])
        fcntl.ioctl(self._server_fd, termios.FIONREAD, buffer, True)
        return buffer[0]

    def _take(self, limit: int | None) -> int:
        taken = 0
        while limit is None or taken < limit:
            want = _READ_CHUNK if limit is None else min(_READ_CHUNK, limit - taken)
            try:
                chunk = os.read(self._server_fd, want)
            except BlockingIOError:
                break
            if not chunk:
                break
            taken += len(chunk)
        return taken

    def _release_fds(self) -> None:
        self._closed = True
        for fd in (self._server_fd, self._read_fd, self._write_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._server_fd = self._read_fd = self._write_fd = -1
        if self._fifo_path is not None:
            try:
                if stat.S_ISFIFO(os.lstat(self._fifo_path).st_mode):
                    os.unlink(self._fifo_path)
            except OSError:
                pass
