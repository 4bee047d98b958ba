"""Waking the memory control at once when the kernel reports a memory stall.

A PSI trigger (``/proc/pressure/memory``, Linux 5.2+) is a line written to
the open file: ``some <stall us> <window us>`` asks the kernel to signal
POLLPRI on that file descriptor whenever tasks were stalled on memory for at
least ``stall`` microseconds within a ``window``. Trio cannot wait for
POLLPRI, so ``PsiTrigger`` waits for it with ``select.poll`` in a daemon
thread of its own and hands each event to the Trio thread through the run's
``TrioToken`` (``run_sync_soon``: it never blocks the thread, so shutdown
cannot deadlock on it). The worker's memory control then samples at once and
keeps sampling fast for a while (``MemoryControl.pressure_event``), so the
hard floor holds for an action that allocates faster than the timer samples.

Which trigger (``TRIGGER_SPECS``, tried in order):

1. ``some 50000 500000``: 50 ms of stall within 0.5 s (the shortest window
   the kernel takes). The kernel checks such a trigger about ten times per
   window, so an event comes within about 50 ms of the stall passing 50 ms.
   Only a caller with CAP_SYS_RESOURCE may make it; without it the kernel
   refuses it (EINVAL on Linux 6.5+, which is what ``register_trigger``
   reports). Root inside a container may lack CAP_SYS_RESOURCE (as on the
   machine lre was built on).
2. ``some 100000 2000000``: 100 ms of stall within 2 s, which Linux 6.5+
   accepts from any user (an unprivileged window must be a multiple of 2 s);
   the kernel evaluates it with its 2 s averages, so an event can come up to
   about 2 s after the stall began. Before 6.5 the kernel refuses every
   trigger from a caller without CAP_SYS_RESOURCE.

Where ``/proc/pressure/memory`` is missing (no PSI, or ``psi=0``), cannot be
opened for writing, or every line is refused, there is no trigger: the
memory control samples on its timer alone (``sample_interval``, and
``pressure_sample_interval`` while memory is short). ``mode`` says which is
active ("psi trigger: ..." or "timer: <why>"), as ``/status`` shows it. If the
kernel reports an error on the trigger later (POLLERR), the thread ends and
``mode`` falls back to the timer, naming that.

Lifetime: ``run`` (started with ``nursery.start``) registers the trigger and
starts the thread before ``started()``; when the task ends (cancelled), the
thread is told to stop through a pipe, joined, and every file descriptor is
closed, so neither outlives the worker.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable

import trio

__all__ = [
    "PSI_MEMORY",
    "TRIGGER_SPECS",
    "PsiTrigger",
    "TriggerSource",
    "TriggerUnavailable",
    "register_trigger",
]

log = logging.getLogger(__name__)

PSI_MEMORY = "/proc/pressure/memory"

#: Trigger lines tried in order (see the module docstring).
TRIGGER_SPECS: tuple[str, ...] = ("some 50000 500000", "some 100000 2000000")

#: Seconds ``close`` waits for the thread to end (it ends within a poll).
JOIN_TIMEOUT_S = 5.0


class TriggerUnavailable(Exception):
    """No trigger could be registered; the message says why."""


class TriggerSource:
    """A file descriptor whose readiness means "memory stalled": ``fd``,
    the poll ``events`` to wait for (POLLPRI for PSI; POLLIN for an eventfd,
    which is then read to reset it) and what it is (``describe``).
    ``close`` closes ``fd``."""

    __slots__ = ("describe", "events", "fd")

    def __init__(self, fd: int, events: int, describe: str) -> None:
        self.fd = fd
        self.events = events
        self.describe = describe

    def close(self) -> None:
        os.close(self.fd)


def register_trigger(
    path: str = PSI_MEMORY, specs: tuple[str, ...] = TRIGGER_SPECS
) -> TriggerSource:
    """Open ``path`` and write the first trigger line of ``specs`` the kernel
    accepts. Raises ``TriggerUnavailable`` naming the reason (file missing,
    not writable, every line refused); nothing stays open then."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise TriggerUnavailable(f"{path} does not exist (no PSI in this kernel)") from None
    except OSError as error:
        raise TriggerUnavailable(f"cannot open {path} to write: {error.strerror}") from None
    refused = []
    for spec in specs:
        try:
            # A failed write leaves no trigger behind, so the next may follow.
            os.write(fd, spec.encode() + b"\0")
        except OSError as error:
            refused.append(f"{spec!r}: {error.strerror or error}")
            continue
        return TriggerSource(fd, select.POLLPRI, f"psi trigger: {spec} ({path})")
    os.close(fd)
    raise TriggerUnavailable(f"{path} refused every trigger ({'; '.join(refused)})")


class PsiTrigger:
    """See the module docstring. ``on_event`` is called on the Trio thread
    for each stall event (an exception it raises is logged). ``open_source``
    registers the trigger (``register_trigger`` by default; tests give an
    eventfd fed by hand) and raises ``TriggerUnavailable`` when there is none.
    """

    def __init__(
        self,
        on_event: Callable[[], object],
        *,
        open_source: Callable[[], TriggerSource] = register_trigger,
    ) -> None:
        self._on_event = on_event
        self._open_source = open_source
        self._source: TriggerSource | None = None
        self._stop_read = self._stop_write = -1
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        #: What wakes the memory control ("psi trigger: ..." or "timer: why").
        self.mode = "timer: psi trigger not started"
        #: Stall events handed to ``on_event`` so far.
        self.events = 0

    @property
    def active(self) -> bool:
        """Whether a trigger is registered and watched now."""
        return self.mode.startswith("psi trigger")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register and watch until cancelled; without a trigger, just wait
        (the timer does the sampling). Closes everything when it ends."""
        try:
            self._start()
            task_status.started()
            await trio.sleep_forever()
        finally:
            self.close()

    def _start(self) -> None:
        try:
            source = self._open_source()
        except TriggerUnavailable as error:
            self.mode = f"timer: {error}"
            log.info("memory control samples on its timer only: %s", error)
            return
        self._source = source
        self._token = trio.lowlevel.current_trio_token()
        self._stop_read, self._stop_write = os.pipe()
        self._thread = threading.Thread(
            target=self._watch,
            args=(source.fd, source.events, self._stop_read),
            name="lre psi trigger",
            daemon=True,
        )
        self.mode = source.describe
        self._thread.start()
        log.info("memory control is woken by a %s", source.describe)

    def close(self) -> None:
        """Stop and join the thread, close the trigger and the pipe (safe to
        call more than once)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            try:
                os.write(self._stop_write, b"x")
            except OSError:  # pragma: no cover - the pipe is ours and open
                pass
            thread.join(JOIN_TIMEOUT_S)
            if thread.is_alive():  # pragma: no cover - poll returns on the pipe
                log.error("psi trigger thread did not stop within %.0f s", JOIN_TIMEOUT_S)
        for fd in (self._stop_read, self._stop_write):
            if fd >= 0:
                os.close(fd)
        self._stop_read = self._stop_write = -1
        source, self._source = self._source, None
        if source is not None:
            source.close()
            if self.active:
                self.mode = "timer: psi trigger closed"

    # ------------------------------------------------------------------ the thread

    def _watch(self, fd: int, events: int, stop: int) -> None:
        poller = select.poll()
        poller.register(fd, events)
        poller.register(stop, select.POLLIN)
        while True:
            ready = poller.poll()
            for ready_fd, revents in ready:
                if ready_fd == stop:
                    return
                if revents & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                    self._hand_over(self._failed, revents)
                    return
                if revents & select.POLLIN:
                    try:  # an eventfd: reading resets it
                        os.read(fd, 8)
                    except BlockingIOError:
                        pass
                if not self._hand_over(self._deliver, revents):
                    return

    def _hand_over(self, function: Callable[[int], object], revents: int) -> bool:
        """Run ``function(revents)`` on the Trio thread soon; False once the
        run has finished (the thread should end)."""
        assert self._token is not None
        try:
            self._token.run_sync_soon(function, revents)
        except trio.RunFinishedError:
            return False
        return True

    # ------------------------------------------------------------------ the Trio thread

    def _deliver(self, revents: int) -> None:
        self.events += 1
        try:
            self._on_event()
        except Exception:
            log.exception("psi trigger: the event handler failed")

    def _failed(self, revents: int) -> None:
        self.mode = f"timer: psi trigger failed (poll events {revents:#x})"
        log.warning("memory control: %s; sampling on the timer only", self.mode)
