"""name_os_thread: the kernel shows the names lre gives its threads."""

from __future__ import annotations

import threading
from pathlib import Path

from lre.hop import name_os_thread


def kernel_name(native_id: int | None) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().strip()


def test_names_the_calling_thread_cut_to_fifteen_bytes() -> None:
    seen: dict[str, str] = {}

    def body() -> None:
        name_os_thread("lre-a-rather-long-thread-name")
        seen["self"] = kernel_name(threading.get_native_id())

    before = kernel_name(threading.get_native_id())
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen["self"] == "lre-a-rather-lo"
    assert kernel_name(threading.get_native_id()) == before  # only the caller is renamed
