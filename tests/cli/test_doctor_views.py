"""`lre doctor`'s view filesystem check, against procfs and sysfs trees made
in the test (the real ones say whatever this machine's disk is)."""

from __future__ import annotations

import os
from pathlib import Path

from lre.cli._doctor_views import Ext4Mount, ext4_mount_of, view_filesystem_check
from lre.config import Config
from tests._support.configs import app_config_text, config_of

#: ext4's options as /proc/fs/ext4/<device>/options lists them (abridged).
_JOURNALED = "rw\nbsddf\nnodiscard\njournal_checksum\ndata=ordered\n"
_NO_JOURNAL = "rw\nbsddf\ndiscard\nnojournal_checksum\n"


def _fake_kernel(tmp_path: Path, path: Path, fstype: str, options: str | None) -> tuple[str, str]:
    """A procfs and a sysfs under ``tmp_path`` that put ``path``'s device on
    a mount of ``fstype`` named ``vdz`` (another mount first, as on a real
    machine), with ``options`` as its ext4 options; returns (proc, sys)."""
    dev = os.stat(path).st_dev
    majmin = f"{os.major(dev)}:{os.minor(dev)}"
    proc, sys = tmp_path / "proc", tmp_path / "sys"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(
        "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
        f"25 1 {majmin} / / rw,relatime shared:1 - {fstype} /dev/mapper/vg-root rw\n"
    )
    target = sys / "devices" / "virtual" / "block" / "vdz"
    target.mkdir(parents=True)
    (sys / "dev" / "block").mkdir(parents=True)
    (sys / "dev" / "block" / majmin).symlink_to(target)
    if options is not None:
        (proc / "fs" / "ext4" / "vdz").mkdir(parents=True)
        (proc / "fs" / "ext4" / "vdz" / "options").write_text(options)
    return str(proc), str(sys)


def _config(tmp_path: Path, *, view: bool = True) -> Config:
    """A config whose worker works (not made yet) under ``tmp_path`` with
    ``sandbox_view`` as given."""
    fields = f", sandbox_view: {'true' if view else 'false'}"
    return config_of(app_config_text(tmp_path / "home", extra_worker=fields))


def test_ext4_without_a_journal_is_found_by_the_kernel_name_of_its_device(
    tmp_path: Path,
) -> None:
    proc, sys = _fake_kernel(tmp_path, tmp_path, "ext4", _NO_JOURNAL)
    assert ext4_mount_of(str(tmp_path / "not" / "made"), proc=proc, sys=sys) == Ext4Mount(
        "vdz", journal=False
    )


def test_a_data_mode_in_the_options_means_a_journal(tmp_path: Path) -> None:
    proc, sys = _fake_kernel(tmp_path, tmp_path, "ext4", _JOURNALED)
    assert ext4_mount_of(str(tmp_path), proc=proc, sys=sys) == Ext4Mount("vdz", journal=True)


def test_other_filesystems_are_not_ext4(tmp_path: Path) -> None:
    proc, sys = _fake_kernel(tmp_path, tmp_path, "btrfs", None)
    assert ext4_mount_of(str(tmp_path), proc=proc, sys=sys) is None


def test_the_real_dev_shm_is_a_tmpfs_not_an_ext4() -> None:
    assert ext4_mount_of("/dev/shm") is None


def test_views_on_ext4_without_a_journal_warn_with_the_fix(tmp_path: Path) -> None:
    proc, sys = _fake_kernel(tmp_path, tmp_path, "ext4", _NO_JOURNAL)
    check = view_filesystem_check(_config(tmp_path), proc=proc, sys=sys)
    assert check.status == "WARN"
    assert f"{tmp_path / 'home' / 'work'} (worker local, /dev/vdz)" in check.message
    assert "journal" in check.fix


def test_views_on_a_journaled_ext4_pass(tmp_path: Path) -> None:
    proc, sys = _fake_kernel(tmp_path, tmp_path, "ext4", _JOURNALED)
    assert view_filesystem_check(_config(tmp_path), proc=proc, sys=sys).status == "OK"


def test_workers_without_views_are_skipped(tmp_path: Path) -> None:
    proc, sys = _fake_kernel(tmp_path, tmp_path, "ext4", _NO_JOURNAL)
    check = view_filesystem_check(_config(tmp_path, view=False), proc=proc, sys=sys)
    assert check.status == "SKIP"


def test_an_unreadable_kernel_file_is_said_and_passes(tmp_path: Path) -> None:
    # ext4 by mountinfo, but no /proc/fs/ext4 entry for the device.
    proc, sys = _fake_kernel(tmp_path, tmp_path, "ext4", None)
    check = view_filesystem_check(_config(tmp_path), proc=proc, sys=sys)
    assert check.status == "OK"
    assert check.message.startswith(f"cannot tell the filesystem of {tmp_path / 'home' / 'work'}")
