"""run_dashboard: frames from sync/async sources, errors as notices, `q` on a real pty."""

from __future__ import annotations

import io
import os
import sys
import termios
from collections.abc import Iterator
from dataclasses import replace

import pytest
import trio
from rich.console import Console

from lre.snapshot import ProcessSnapshot
from lre.tui import run_dashboard
from tests.tui._sample import sample_snapshot


def console(out: io.StringIO) -> Console:
    return Console(file=out, width=100, height=40, force_terminal=True, color_system=None)


async def test_frames_from_a_sync_source() -> None:
    calls = 0

    def source() -> ProcessSnapshot:
        nonlocal calls
        calls += 1
        # a minute later each time: the header's uptime changes
        snapshot = sample_snapshot()
        return replace(snapshot, taken_at=snapshot.taken_at + 60 * calls)

    out = io.StringIO()
    await run_dashboard(source, console=console(out), refresh_per_second=50, screen=False,
                        max_frames=3)  # fmt: skip
    assert calls == 3
    text = out.getvalue()
    assert "up 1h01m" in text and "up 1h02m" in text and "up 1h03m" in text


async def test_a_frame_equal_to_the_last_is_not_redrawn() -> None:
    calls = 0

    def source() -> ProcessSnapshot:
        nonlocal calls
        calls += 1
        return sample_snapshot()

    out = io.StringIO()
    await run_dashboard(source, console=console(out), refresh_per_second=50, screen=False,
                        max_frames=4)  # fmt: skip
    assert calls == 4  # asked every frame
    # Drawn once; rich's Live draws the last frame once more when it stops.
    assert out.getvalue().count("In flight (5)") == 2


async def test_errors_show_a_notice_and_keep_the_last_screen() -> None:
    answers: Iterator[ProcessSnapshot | OSError] = iter(
        [
            OSError("cannot reach lre at 127.0.0.1:1: refused"),
            sample_snapshot(),
            OSError("cannot reach lre at 127.0.0.1:1: gone"),
        ]
    )

    async def source() -> ProcessSnapshot:
        answer = next(answers)
        if isinstance(answer, OSError):
            raise answer
        return answer

    out = io.StringIO()
    await run_dashboard(source, console=console(out), refresh_per_second=50, screen=False,
                        max_frames=3)  # fmt: skip
    text = out.getvalue()
    assert "refused" in text
    last_frame = text[text.rindex("gone") :]
    assert "In flight (5)" in last_frame  # the last good snapshot stays on screen
    good_frame = text[text.index("refused") : text.rindex("gone")]
    assert "● ok" in good_frame
    assert "● ok" not in last_frame  # lre stopped: the stale header no longer says ok


async def test_q_on_a_terminal_quits_and_restores_the_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    master, slave = os.openpty()
    try:
        before = termios.tcgetattr(slave)
        tty_in = os.fdopen(os.dup(slave), "r")
        monkeypatch.setattr(sys, "stdin", tty_in)
        out = io.StringIO()

        async def press_q() -> None:
            await trio.sleep(0.2)
            during = termios.tcgetattr(slave)
            assert not during[3] & termios.ICANON  # cbreak while the dashboard runs
            os.write(master, b"x q")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(press_q)
            with trio.fail_after(5):
                await run_dashboard(sample_snapshot, console=console(out), quit_keys=True,
                                    refresh_per_second=20, screen=True)  # fmt: skip
        assert termios.tcgetattr(slave) == before
        assert "\x1b[?1049h" in out.getvalue() and "\x1b[?1049l" in out.getvalue()  # alt screen
        tty_in.close()
    finally:
        os.close(master)
        os.close(slave)
