"""The dashboard rendered to fixed-width rich consoles from a known snapshot.

The committed screens are tests/tui/screen_<width>.txt; regenerate them with
``LRE_UPDATE_SCREENS=1 pytest tests/tui`` after a deliberate change (and
read the diff).
"""

from __future__ import annotations

import io
import os
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from lre.snapshot import EventKind, ProcessSnapshot, RecentEvent
from lre.tui import render_dashboard
from lre.tui._render import rss_style
from tests.tui._sample import MIB, sample_snapshot

HERE = Path(__file__).parent


def plain(width: int, height: int | None = None, **kwargs: object) -> str:
    console = Console(
        width=width, file=io.StringIO(), color_system=None, force_terminal=False, record=True
    )
    console.print(render_dashboard(sample_snapshot(), width=width, height=height, **kwargs))  # type: ignore[arg-type]
    return console.export_text()


def ansi(width: int) -> str:
    out = io.StringIO()
    console = Console(width=width, file=out, color_system="standard", force_terminal=True)
    console.print(render_dashboard(sample_snapshot(), width=width))
    return out.getvalue()


@pytest.mark.parametrize("width", [120, 60])
def test_screen_matches_committed(width: int) -> None:
    text = plain(width)
    path = HERE / f"screen_{width}.txt"
    if os.environ.get("LRE_UPDATE_SCREENS") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} is missing; run with LRE_UPDATE_SCREENS=1 to create it"
    assert text == path.read_text()


def test_wide_screen_content() -> None:
    lines = plain(120).splitlines()
    assert lines[1].startswith("│ lre 127.0.0.1:50051  up 1h00m  ● ok")
    # 13 of 16 CPUs -> 16 of 20 cells; 10.5 of min(12 budget, 24 capacity) GiB -> 18 of 20
    # reservations, and beside them what the host really uses
    assert (
        "reserved CPU ████████████████░░░░ 13/16   MEM ██████████████████░░ 10.5G/12.0G" in lines[2]
    )
    assert "host CPU 87% of 16 cores   RAM 14.0G/24.0G in use" in lines[3]
    assert "actions RSS ███████████░░░░░░░░░ 6.8G/12.0G budget" in lines[4]
    assert "queued 42  running 5  done/s 3.4  done 1220  cache hits 25%" in lines[5]
    assert "CAS cas 3.2G/10.0G  make jobs 5/14" in lines[5]
    assert (
        "build 5f0c3a52 bazel 7.1.0 running 2m15s: 120 run 80 cached 1 failed 2 killed" in lines[6]
    )
    assert "last build a1b2c3d4 bazel 7.1.0 took 5m00s: 40 run 400 cached" in lines[7]
    assert "0 failed 0 killed 44 cancelled" in lines[7]  # stopped, not failed
    header = next(line for line in lines if line.startswith("Action"))
    assert header.split() == [
        "Action", "Target", "Worker", "Elapsed", "RSS/resv", "RSS/budget",
        "Peak", "CPU%", "CPUs",
    ]  # fmt: skip
    rows = [line.split()[0] for line in lines[lines.index(header) + 2 :][:5]]
    assert rows == ["rustc", "CppLink", "gcc", "CppCompile", "Javac"]  # longest first
    gcc = next(line for line in lines if line.startswith("gcc"))
    assert gcc.split() == ["gcc", "-", "local", "12s", "700M/512M", "█░░░░░░░░░", "710M",
                           "95", "1"]  # fmt: skip
    assert any("//src/app:main_binary_with_a_long_name " in line for line in lines)  # whole
    rustc = next(line for line in lines if line.startswith("rustc"))
    assert " all" in rustc and "████░░░░░░" in rustc  # exclusive; 5 of its worker's 12 GiB
    # the queue by platform (not by sizes), the next targets and what each waits for
    assert any(
        line.startswith("Queued 42: OSFamily=linux 39 · OSFamily=windows 3") for line in lines
    )
    parser = next(line for line in lines if line.startswith("//src/core:parser"))
    assert parser.split()[:3] == ["//src/core:parser", "CppCompile", "4.0s"]
    assert "waits for CPU slots" in parser
    assert any(line.startswith("//src/app:tests") and "waits for memory budget" in line
               for line in lines)  # fmt: skip
    # events name the target
    kill = next(line for line in lines if " kill " in line)
    assert kill.split()[:2] == ["10s", "kill"] and "//src/app:main_binary" in kill
    assert "650M" in kill and "local" in kill
    assert lines[-1].split() == ["q", "quit", "Ctrl-C", "quit", "(lre", "keeps", "running)"]


def test_narrow_screen_drops_columns_not_rows() -> None:
    lines = plain(60).splitlines()
    assert all(len(line) <= 60 for line in lines)
    header = next(line for line in lines if line.startswith("Action"))
    assert header.split() == ["Action", "Target", "Elapsed", "RSS/resv"]
    assert "In flight (5)" in lines[lines.index(header) - 1]
    assert sum(line.split()[0] in {"rustc", "CppLink", "gcc", "CppCompile", "Javac"}
               for line in lines if line.strip()) == 5  # fmt: skip


def test_rss_turns_red_near_the_kill_line() -> None:
    by_summary = {a.summary: a for a in sample_snapshot().inflight}
    assert rss_style(by_summary["gcc"]) == "bold red"  # 700M >= 0.9 x 614M
    assert rss_style(by_summary["CppCompile"]) == "green"
    assert rss_style(by_summary["Javac"]) == "grey50"  # not sampled yet
    over_reservation = replace(by_summary["CppCompile"], rss_bytes=530 * MIB)  # line 614M
    assert rss_style(over_reservation) == "yellow"
    text = ansi(120)
    gcc_line = next(line for line in text.splitlines() if "gcc" in line)
    compile_line = next(line for line in text.splitlines() if "CppCompile" in line)
    assert "\x1b[1;31m 700M/512M" in gcc_line and "\x1b[1;31m█" in gcc_line
    assert "\x1b[31m" not in compile_line and "\x1b[1;31m" not in compile_line
    assert "\x1b[32m 120M/512M" in compile_line


def test_any_width_renders_within_bounds() -> None:
    for width in (1, 2, 5, 9, 12, 17, 20, 23, 31, 44, 59, 61, 79, 99, 150, 240):
        for height in (None, 5):
            text = plain(width, height)
            assert width < 10 or "lre" in text
            if width >= 20:
                assert max(len(line) for line in text.splitlines()) <= width, width


def test_height_cuts_rows_with_a_count() -> None:
    text = plain(120, height=23)
    assert "… 3 more" in text
    assert "rustc " in text and "1m15s" in text and "3.2s" not in text  # two rows of five
    assert "Recent events" in text and "3m20s  timeout" in text
    assert len(text.splitlines()) == 23
    assert "more" not in plain(120, height=25)
    notice = plain(80, notice="cannot reach lre at 127.0.0.1:1: refused").splitlines()
    assert notice[0] == "cannot reach lre at 127.0.0.1:1: refused"


def test_kept_table_renderings_follow_the_snapshot() -> None:
    # The queue and event tables are rendered once per content and width and
    # reused (lre.tui._render._Memo): a changed age, queue or width must show
    # at once, and going back must give the first screen again.
    first = plain(120)
    later = replace(sample_snapshot(), taken_at=sample_snapshot().taken_at + 3600)
    console = Console(
        width=120, file=io.StringIO(), color_system=None, force_terminal=False, record=True
    )
    console.print(render_dashboard(later, width=120))
    aged = console.export_text()
    assert aged != first
    assert "1h00m  kill" in aged  # the newest event, 10 s old before, now 1h00m10s -> 1h00m
    requeued = replace(sample_snapshot(), queued_by_platform={"OSFamily=linux": 7})
    console.print(render_dashboard(requeued, width=120))
    assert "Queued 7: OSFamily=linux 7" in console.export_text()
    assert plain(60) == (HERE / "screen_60.txt").read_text()
    assert plain(120) == first


def _header_of(snapshot: object, width: int) -> list[str]:
    console = Console(
        width=width, file=io.StringIO(), color_system=None, force_terminal=False, record=True
    )
    console.print(render_dashboard(snapshot, width=width))  # type: ignore[arg-type]
    lines = console.export_text().splitlines()
    return next(line for line in lines if line.startswith("Action")).split()


def test_target_before_worker_at_every_width_and_no_worker_column_for_one_worker() -> None:
    several = sample_snapshot()
    for width in range(30, 241, 7):
        header = _header_of(several, width)
        if "Worker" in header:
            assert "Target" in header and header.index("Target") < header.index("Worker")
        if width >= 50:
            assert "Target" in header, width
    single = replace(
        several,
        workers=several.workers[1:],
        inflight=tuple(replace(a, worker="local") for a in several.inflight),
    )
    for width in (80, 160, 240):
        assert "Worker" not in _header_of(single, width)
    assert "Target" in _header_of(single, 80)


def test_columns_are_as_wide_as_their_content() -> None:
    lines = plain(160).splitlines()
    header = next(line for line in lines if line.startswith("Action"))
    # Action is as wide as "CppCompile", Target as the longest target
    assert header.index("Target") == len("CppCompile") + 3
    longest = "//src/app:main_binary_with_a_long_name"
    assert header.index("Worker") == header.index("Target") + len(longest) + 3
    row = next(line for line in lines if "CppLink" in line and "1m15s" in line)
    assert "1000M/1.0G" in row and "1010M" in row  # nothing cut next to a wide column
    assert row.rstrip().endswith("1     1")


def test_the_footer_names_the_keys_of_each_dashboard() -> None:
    from lre.tui._render import UP_FOOTER

    console = Console(
        width=100, file=io.StringIO(), color_system=None, force_terminal=False, record=True
    )
    console.print(render_dashboard(sample_snapshot(), width=100, keys=UP_FOOTER))
    assert console.export_text().splitlines()[-1].split() == [
        "q", "stop", "lre", "after", "its", "running", "actions",
        "Ctrl-C", "the", "same;", "twice:", "cancel", "them",
    ]  # fmt: skip


def test_events_name_their_targets_at_narrow_widths_too() -> None:
    for width in (60, 79):
        lines = plain(width).splitlines()
        events = lines[next(i for i, line in enumerate(lines) if "Recent events" in line) + 1 :]
        kill = next(line for line in events if " kill " in f" {line}")
        assert "//src/app:main" in kill, (width, kill)
        timeout = next(line for line in events if "timeout" in line)
        assert "//gen:slow" in timeout, (width, timeout)


def test_nothing_running_is_said_in_full() -> None:
    idle = replace(sample_snapshot(), inflight=())
    for width in (80, 160):
        console = Console(
            width=width, file=io.StringIO(), color_system=None, force_terminal=False, record=True
        )
        console.print(render_dashboard(idle, width=width))
        assert "nothing running" in console.export_text(), width


def _screen(snapshot: ProcessSnapshot, width: int, *, color: bool = False) -> str:
    out = io.StringIO()
    console = Console(
        width=width,
        file=out,
        color_system="standard" if color else None,
        force_terminal=color,
        record=not color,
    )
    console.print(render_dashboard(snapshot, width=width))
    return out.getvalue() if color else console.export_text()


_FROZEN_TARGET = "//src/app:main_binary_with_a_long_name"


def _with_memory_events() -> ProcessSnapshot:
    snapshot = sample_snapshot()
    now = snapshot.taken_at
    frozen = RecentEvent(
        now - 2,
        EventKind.FREEZE,
        f"CppLink {_FROZEN_TARGET}: frozen (SIGSTOP) at 1000 MiB RSS, reserving 1 GiB: "
        "host MemAvailable 1536 MiB is under the headroom of 2048 MiB",
        "CppLink",
        "local",
        target=_FROZEN_TARGET,
    )
    thawed = RecentEvent(
        now - 1,
        EventKind.THAW,
        "CppCompile //src/core:engine: thawed after 4.3 s frozen, at 120 MiB RSS, reserving "
        "512 MiB: memory freed: host MemAvailable 9000 MiB",
        "CppCompile",
        "local",
        target="//src/core:engine",
    )
    return replace(snapshot, events=(thawed, frozen, *snapshot.events))


def test_freezes_and_thaws_are_events_naming_target_mnemonic_rss_and_reason() -> None:
    snapshot = _with_memory_events()
    lines = _screen(snapshot, 200).splitlines()
    freeze = next(line for line in lines if " freeze " in line)
    assert freeze.split()[:2] == ["2.0s", "freeze"]
    assert freeze.split()[2].startswith("//src/app:main_binary")  # cut at 32 cells
    # the target is not repeated in the detail; mnemonic, RSS and reason are there
    assert freeze.count("main_binary") == 1
    assert (
        "CppLink: frozen (SIGSTOP) at 1000 MiB RSS, reserving 1 GiB: host MemAvailable " in freeze
    )
    assert "under the headroom of 2048 MiB" in freeze
    thaw = next(line for line in lines if " thaw " in line)
    assert "//src/core:engine" in thaw and "CppCompile: thawed after 4.3 s frozen" in thaw
    assert "memory freed" in thaw
    for width in (60, 79):  # narrow: kind, target, detail
        narrow = _screen(snapshot, width).splitlines()
        assert any(line.startswith("freeze") and "//src/app:main" in line for line in narrow)
        assert any(line.startswith("thaw") and "//src/core:engine" in line for line in narrow)
    # a long message leaves age, kind, target and worker their columns
    wide = _screen(snapshot, 120).splitlines()
    assert any(line.split()[:2] == ["2.0s", "freeze"] and " local " in line for line in wide)
    colored = _screen(snapshot, 120, color=True)
    assert "\x1b[36mfreeze" in colored and "\x1b[32mthaw" in colored


def test_the_memory_bar_is_the_actions_rss_against_the_budget_with_the_ceiling() -> None:
    lines = plain(120).splitlines()
    # 120M + 1000M + 700M + 5G = 6.8G of the 12G budget -> 11 of 20 cells; the
    # hard ceiling (the actions' kill line) beside it
    assert "actions RSS ███████████░░░░░░░░░ 6.8G/12.0G budget   ceiling 9.6G" in lines[4], lines[4]
    header = next(line for line in lines if line.startswith("Action"))
    assert "RSS/budget" in header and "Kill line" not in header
    rustc = next(line for line in lines if line.startswith("rustc"))
    assert "████░░░░░░" in rustc  # 5G of the big worker's 12G budget, not of its 9.6G line
    frozen = replace(
        sample_snapshot(),
        inflight=tuple(replace(a, frozen=a.summary == "gcc") for a in sample_snapshot().inflight),
    )
    assert "   1 frozen" in _screen(frozen, 120).splitlines()[4]
    unbudgeted = replace(
        sample_snapshot(),
        memory_budget_bytes=None,
        memory_capacity_bytes=2 << 60,
        workers=tuple(replace(w, memory_capacity_bytes=1 << 60) for w in sample_snapshot().workers),
    )
    line = _screen(unbudgeted, 120).splitlines()[4]
    assert "actions RSS 6.8G (no memory budget)   ceiling 9.6G" in line, line


def test_builds_sharing_the_workers_show_their_shares() -> None:
    from lre.snapshot import BuildShareRow

    big = BuildShareRow(
        "5f0c3a52-8d7e",
        "app",
        "bazel 4.2.3",
        1.0,
        0.5,
        0.67,
        2,
        380,
    )
    small = BuildShareRow("a1b2c3d4-0000", "", "buck2 2025-01-01", 1.0, 0.5, 0.33, 1, 4)
    snapshot = replace(sample_snapshot(), build_shares=(big, small))
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(render_dashboard(snapshot, width=120))
    text = console.export_text()
    assert "share 5f0c3a52 bazel 4.2.3 [app] 50% fair, holds 67%: 2 running 380 queued" in text
    assert "share a1b2c3d4 buck2 2025-01-01 50% fair, holds 33%: 1 running 4 queued" in text
    assert ProcessSnapshot.loads(snapshot.dumps()).build_shares == (big, small)
    alone = replace(sample_snapshot(), build_shares=(big,))
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(render_dashboard(alone, width=120))
    assert "share 5f0c3a52" not in console.export_text()  # a lone build has it all


def test_each_running_build_has_its_line_with_its_repository() -> None:
    """Two builds at once are two ``build`` lines, each naming its repository;
    the build that ended is the one ``last build`` line."""
    snapshot = sample_snapshot()
    running, ended = snapshot.builds
    two = (
        replace(running, repository="app-1f2e3d4c"),
        replace(running, invocation="77aa4372-second", repository="web-60a40dee"),
        ended,
    )
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None, force_terminal=False)
    console.print(render_dashboard(replace(snapshot, builds=two), width=120))
    lines = out.getvalue().splitlines()
    assert any(
        "│ build [app-1f2e3d4c] 5f0c3a52 bazel 7.1.0 running 2m15s" in line for line in lines
    )
    assert any("│ build [web-60a40dee] 77aa4372 bazel 7.1.0 running" in line for line in lines)
    assert sum("last build" in line for line in lines) == 1


def test_the_queue_list_uses_the_rows_the_in_flight_table_leaves_free() -> None:
    """One action running and eight queued on a 40-row screen: all eight
    queued actions are listed, not the first four."""
    snapshot = sample_snapshot()
    first = snapshot.queued_next[0]
    queued = tuple(
        replace(first, operation=f"main/operations/{n:04}", target=f"//q:t{n}") for n in range(8)
    )
    snapshot = replace(snapshot, queued_next=queued, inflight=snapshot.inflight[:1])
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None, force_terminal=False)
    console.print(render_dashboard(snapshot, width=120, height=40))
    text = out.getvalue()
    assert all(f"//q:t{n} " in text for n in range(8)), text
    assert len(text.splitlines()) <= 40


def test_the_reservation_is_never_cut_while_the_screen_has_room() -> None:
    """``RSS/resv`` is as wide as its figures: 99.9M of 99.9M reserved shows
    whole at 120 columns, not cut to ``99.9M/99.…``."""
    snapshot = sample_snapshot()
    action = replace(
        snapshot.inflight[0], rss_bytes=int(99.9 * MIB), reserved_memory_bytes=int(99.9 * MIB)
    )
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None, force_terminal=False)
    console.print(render_dashboard(replace(snapshot, inflight=(action,)), width=120))
    assert "99.9M/99.9M" in out.getvalue()
