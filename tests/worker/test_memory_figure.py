"""Which figure a run records, and where it came from (``_memory_figure``),
and lre's own image in a first process's kernel figure (``_own_image``)."""

from __future__ import annotations

import os
import subprocess

from lre.snapshot import MEMORY_BELOW_IMAGE, MEMORY_KERNEL, MEMORY_SAMPLED
from lre.worker.memory._memory_figure import memory_figure
from lre.worker.process._process import ProcessOutcome
from lre.worker.usage._own_image import OwnImage
from lre.worker.usage._sampler import ActionUsage

MiB = 1 << 20


def _process(max_rss: int, image: int, tree: int = 0) -> ProcessOutcome:
    return ProcessOutcome(
        exit_code=0,
        signal=None,
        timed_out=False,
        oom_killed=False,
        started_at=0.0,
        ended_at=1.0,
        cpu_seconds=0.0,
        max_rss_bytes=max_rss,
        own_image_bytes=image,
        tree_peak_bytes=tree,
    )


def _sampled(peak: int, samples: int = 3) -> ActionUsage:
    return ActionUsage(
        action_id="a",
        leader_pid=1,
        rss_bytes=0,
        peak_rss_bytes=peak,
        cpu_seconds=0.0,
        average_millicpus=0,
        processes=1,
        peak_processes=1,
        samples=samples,
        wall_seconds=1.0,
        kill_line_bytes=0,
        peak_memory_bytes=peak,
    )


def test_a_kernel_figure_at_lre_s_size_is_not_the_action_s() -> None:
    # ended before any pass; the kernel's 72 MiB is lre's image (bound 80 MiB)
    assert memory_figure(_process(72 * MiB, 80 * MiB), None) == (0, MEMORY_BELOW_IMAGE)
    assert memory_figure(_process(72 * MiB, 80 * MiB), _sampled(0, 0)) == (0, MEMORY_BELOW_IMAGE)
    # without a bound (unknown), never trusted
    assert memory_figure(_process(300 * MiB, 0), None) == (0, MEMORY_BELOW_IMAGE)


def test_a_kernel_figure_above_lre_s_image_is_the_action_s() -> None:
    assert memory_figure(_process(200 * MiB, 80 * MiB), None) == (200 * MiB, MEMORY_KERNEL)


def test_the_larger_of_the_sampled_and_the_kernel_figure() -> None:
    # a process peaked between two passes: the kernel saw it
    assert memory_figure(_process(200 * MiB, 80 * MiB), _sampled(150 * MiB)) == (
        200 * MiB,
        MEMORY_KERNEL,
    )
    # processes held memory together (or in tmpfs): the passes saw more
    assert memory_figure(_process(200 * MiB, 80 * MiB), _sampled(400 * MiB)) == (
        400 * MiB,
        MEMORY_SAMPLED,
    )
    # a sampled small action: the hidden kernel figure does not override it
    assert memory_figure(_process(72 * MiB, 80 * MiB), _sampled(3 * MiB)) == (
        3 * MiB,
        MEMORY_SAMPLED,
    )


def test_the_bound_covers_what_a_spawned_child_carries() -> None:
    """A child started the way lre starts actions reports lre's image in its
    ``ru_maxrss``; the bound is at least that, and well below a figure of its
    own above lre's size."""
    own = OwnImage()
    ballast = b"x" * (64 * MiB)  # lre's image grows past what a small child uses
    own.before_spawn()
    child = subprocess.Popen(["/bin/sh", "-c", "exit 0"], start_new_session=True)
    bound = own.after_spawn()
    _, _, usage = os.wait4(child.pid, 0)
    child.returncode = 0
    carried = usage.ru_maxrss * 1024
    assert carried > 64 * MiB  # the kernel's figure of an sh is lre's image
    assert bound >= carried
    del ballast


def test_pid_1_s_report_is_the_kernel_s_figure_below_lre_s_image() -> None:
    # an echo: lre's wait4 carries lre's 72 MiB, pid 1 reported 1.5 MiB
    report = 3 * MiB // 2
    assert memory_figure(_process(72 * MiB, 80 * MiB, report), None) == (report, MEMORY_KERNEL)
    # a pass that counted nothing of the action's own is no figure
    assert memory_figure(_process(72 * MiB, 80 * MiB, report), _sampled(0)) == (
        report,
        MEMORY_KERNEL,
    )
    assert memory_figure(_process(72 * MiB, 80 * MiB), _sampled(0)) == (0, MEMORY_BELOW_IMAGE)


def test_a_forged_report_lowers_neither_the_sampled_nor_lre_s_own_figure() -> None:
    # the action wrote "1" KiB where pid 1 reports: the passes saw 150 MiB
    assert memory_figure(_process(72 * MiB, 80 * MiB, 1024), _sampled(150 * MiB)) == (
        150 * MiB,
        MEMORY_SAMPLED,
    )
    # lre's own wait4 saw 200 MiB above its image, no pass saw the run
    assert memory_figure(_process(200 * MiB, 80 * MiB, 1024), None) == (200 * MiB, MEMORY_KERNEL)
