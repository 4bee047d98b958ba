"""lre's side of an attack, in a process of its own (see lre_as.py).

argv[1] is a JSON request:

- ``mode``: the containment mode; ``script``: the action (``/bin/sh -c``),
  formatted with ``{guardian}`` (the guardian's pid) and ``{victim}``
  (``victim``: the pid of a process outside any action, started by the test);
- ``leak``: when true, the driver first opens an inheritable descriptor (as
  lre may hold one by accident) so that a test sees whether it reaches the
  action or the guardian;
- ``stall_listing``: when true, the spawner thread stalls after forking
  the action and before listing it with the guardian (as a descheduled
  thread on a loaded machine would), so that a test can SIGKILL this
  process in that window;
- ``then``: ``"down"`` closes lre's end of the guardian channel after the
  action (a clean ``lre down``) and waits for the guardian; ``"hang"`` prints
  ``{"running": true}`` (with the action's stdout and the guardian's pid)
  once the action wrote a line to its stdout and then sleeps (the test
  SIGKILLs this process).

Prints one JSON line: the action's stdout, stderr and exit code, and the
guardian's descriptors (``{fd: target}``, None when this user cannot read them).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import trio

from lre.worker import choose_containment
from lre.worker.process._process import SpawnRequest, run_process


async def main(request: dict[str, Any]) -> None:
    here = Path.cwd()
    if request.get("leak"):
        leaked = os.open(here / "leaked", os.O_WRONLY | os.O_CREAT, 0o600)
        os.set_inheritable(leaked, True)
    containment = choose_containment(request["mode"])
    common = {
        "cwd": here,
        "env": {"PATH": "/usr/bin:/bin"},
        "stdout_path": here / "out",
        "stderr_path": here / "err",
        "kill_grace": 0.3,
        "containment": containment,
    }
    await run_process(SpawnRequest(["true"], timeout=30.0, **common))  # type: ignore[arg-type]
    guardian = containment.guardian.pid
    if request.get("stall_listing"):

        def stalled(pid: int) -> None:
            time.sleep(3600)  # this process is SIGKILLed meanwhile

        containment.spawn_started = stalled  # type: ignore[method-assign]
    script = request["script"].format(guardian=guardian, victim=request.get("victim", 0))
    if request["then"] == "hang":
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: run_process(
                    SpawnRequest(["/bin/sh", "-c", script], timeout=300.0, **common)  # type: ignore[arg-type]
                )
            )
            with trio.fail_after(60):  # the action writes a line first
                while not (here / "out").exists() or not (here / "out").read_text():  # noqa: ASYNC110
                    await trio.sleep(0.02)
            running = {"running": True, "stdout": (here / "out").read_text(), "guardian": guardian}
            print(json.dumps(running), flush=True)
            await trio.sleep(300)
        return
    spawn = SpawnRequest(["/bin/sh", "-c", script], timeout=60.0, **common)  # type: ignore[arg-type]
    outcome = await run_process(spawn)
    guardian_fds: dict[str, str] | None = {}
    try:
        for name in os.listdir(f"/proc/{guardian}/fd"):
            guardian_fds[name] = os.readlink(f"/proc/{guardian}/fd/{name}")  # type: ignore[index]
    except OSError:
        guardian_fds = None
    if request["then"] == "down":
        containment.guardian.close()
    print(
        json.dumps(
            {
                "stdout": (here / "out").read_text(),
                "stderr": (here / "err").read_text(),
                "exit_code": outcome.exit_code,
                "guardian_fds": guardian_fds,
            }
        )
    )


if __name__ == "__main__":
    os.umask(0o077)
    trio.run(main, json.loads(sys.argv[1]))
