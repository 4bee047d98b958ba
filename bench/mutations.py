"""Break lre on purpose and check that the tests guarding each part notice.

    .venv/bin/python bench/mutations.py [--list] [NAME ...]

Each mutation replaces one piece of code (text that must occur exactly once
in its file) in a scratch copy of the working tree, runs the tests named for
it there, and expects them to FAIL. A mutation whose tests still pass means
a test stopped biting; a mutation whose text no longer occurs means the code
moved and the mutation must follow it. Either exits 1. Nothing in the working
tree is changed. ``tests/test_mutations.py`` checks on every CI run that
each mutation still applies; this script runs them (a few minutes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    name: str
    #: what breaks, in a user's words
    what: str
    file: str
    old: str
    new: str
    #: pytest arguments that must fail once ``old`` is replaced by ``new``
    tests: tuple[str, ...]


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "jobserver-style-ignored",
        "jobserver.style fifo is ignored: every action gets a pipe",
        "lre/worker/process/_action_jobservers.py",
        "        style = self.spec.jobserver.style\n",
        '        style = "pipe"\n',
        ("tests/worker/test_action.py", "-k", "fifo"),
    ),
    Mutation(
        "action-log-never-compacts",
        "the action-cache log is never rewritten, so it grows without end",
        "lre/cas/action_cache/_log.py",
        "        return self.dead_bytes > max(self.compact_after_dead_bytes, self.live_bytes)\n",
        "        return False\n",
        ("tests/cas/action_cache/test_action_cache.py", "-k", "rewritten_away"),
    ),
    Mutation(
        "action-log-stops-at-damage",
        "one damaged record makes start-up cut every record after it",
        "lre/cas/action_cache/_log.py",
        "            pos = window.find(MAGIC, pos + 1)\n",
        "            pos = -1\n",
        ("tests/cas/action_cache/test_action_cache.py", "-k", "damaged_first_record"),
    ),
    Mutation(
        "orphan-sweep-removed",
        "under the portable backend a setsid child of an action outlives it",
        "lre/worker/containment/_group_sweep.py",
        "                _killpg(orphan, signal.SIGKILL)\n"
        "                _kill(orphan, signal.SIGKILL)\n"
        "                self._forget(orphan)\n"
        "                _reap(orphan)  # SIGKILL cannot be ignored: this returns promptly\n"
        "                killed = True\n",
        "                continue\n",
        ("tests/worker/test_containment.py", "-k", "when_the_action_exits and portable"),
    ),
    Mutation(
        "memory-kill-no-op",
        "memory control decides to kill an action over its limit and does nothing",
        "lre/worker/memory/_memory_control.py",
        "            self._kill(action_id, reason, final)\n",
        "            pass\n",
        ("tests/worker/test_memory_control.py",),
    ),
    Mutation(
        "open-files-limit-ignored",
        "global.max_open_files is not applied at start",
        "lre/app/_run.py",
        "    raise_open_files_limit(config.global_.max_open_files)\n",
        "",
        ("tests/app/test_limits.py",),
    ),
    Mutation(
        "memory-store-drops-evict-bytes",
        "a memory store ignores eviction_policy.evict_bytes",
        "lre/app/_stores.py",
        "_max_bytes(policy.max_bytes, name), evict_bytes=int(policy.evict_bytes)",
        "_max_bytes(policy.max_bytes, name)",
        ("tests/app/test_stores.py",),
    ),
    Mutation(
        "ci-skips-pass",
        "a skipped test passes silently under CI",
        "tests/_support/ci.py",
        '    return os.environ.get("CI", "").strip().lower() not in _NOT_CI\n',
        "    return False\n",
        ("tests/test_conftest.py", "-k", "any_true_ci"),
    ),
    Mutation(
        "janitor-idle-too-early",
        "the janitor says it is idle while a batch still runs (counts of "
        "action directories become timing)",
        "lre/worker/directories/_action_dirs.py",
        "        return not (self._trash or self._doomed or self._in_batch)\n",
        "        return True\n",
        ("tests/worker/test_action_dirs.py", "-k", "twice_the_stock"),
    ),
    Mutation(
        "view-host-writable",
        "an action's view leaves the host writable",
        "lre/worker/view/_view.py",
        '        set_attributes("/", set_=MOUNT_ATTR_RDONLY, propagation=MS_SLAVE, '
        "recursive=True)\n",
        '        set_attributes("/", propagation=MS_SLAVE, recursive=True)\n',
        ("tests/worker/test_view_policy.py", "-k", "only_the_writable_paths"),
    ),
    Mutation(
        "writable-property-any-path",
        "sandbox-writable-path makes any host directory writable, configured or not",
        "lre/worker/_view_policy.py",
        "            if covered_by(path, self.writable) is None:\n",
        "            if False:\n",
        ("tests/worker/test_view_writable.py", "-k", "outside_the_configured"),
    ),
    Mutation(
        "writable-follows-symlinks",
        "a writable path is opened through symlinks (one action's link leads "
        "another's mount, a swapped ancestor leads a configured path elsewhere)",
        "lre/worker/view/_view_writable.py",
        "    how = _OpenHow(_OPEN_FLAGS, 0, _RESOLVE_NO_SYMLINKS)\n",
        "    how = _OpenHow(_OPEN_FLAGS, 0, 0)\n",
        ("tests/worker/test_view_writable.py", "-k", "symlink"),
    ),
    Mutation(
        "writable-mask-by-path",
        "lre's directory inside a writable path is masked by its path, so a "
        "decoy left there takes the mask",
        "lre/worker/view/_view.py",
        "    if covered_by(path, writable) is None:\n        return None\n    marks =",
        "    if True:\n        return None\n    marks =",
        ("tests/worker/test_view_writable.py", "-k", "mask_goes_on"),
    ),
    Mutation(
        "view-masks-removed",
        "lre's directories are not masked in an action's view (readable, since the "
        "read-only host already stops every write)",
        "lre/worker/view/_view.py",
        "        for path in view.hidden:\n            holds",
        "        for path in ():\n            holds",
        ("tests/worker/test_view_attacks.py", "-k", "read_lres_own"),
    ),
    Mutation(
        "status-unhealthy-exits-0",
        "`lre status` exits 0 while lre answers unhealthy (LSB wants 2)",
        "lre/cli/_lifecycle.py",
        "    if not healthy:\n        raise typer.Exit(2)\n",
        "",
        ("tests/cli/test_lifecycle.py", "-k", "unhealthy"),
    ),
    Mutation(
        "offline-gc-ignores-the-contract",
        "`lre cache gc` with lre stopped evicts blobs clients were told exist",
        "lre/cli/_cache_cmd.py",
        "        rows.append(await shrink_store(name, store, to, force=force))\n",
        "        rows.append(await shrink_store(name, store, to, force=True))\n",
        ("tests/cli/test_cache_cmd.py", "-k", "told_exist"),
    ),
    Mutation(
        "team-cache-not-cleared",
        "lre.bazelrc leaves a repository's own --remote_cache in force",
        "lre/cli/_bazel_client.py",
        '        "build:lre --remote_cache=",\n',
        "",
        ("tests/cli/test_team_cache.py",),
    ),
)


def check_applies(mutation: Mutation, root: Path = ROOT) -> str | None:
    """None when ``mutation.old`` occurs exactly once in its file; else why not."""
    path = root / mutation.file
    if not path.is_file():
        return f"{mutation.file} does not exist"
    count = path.read_text().count(mutation.old)
    if count != 1:
        return f"{mutation.file}: the text to replace occurs {count} times (want 1)"
    return None


def scratch_copy(into: Path) -> None:
    """The working tree's files (tracked and untracked, not ignored) under ``into``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.split(b"\0")  # fmt: skip
    for raw in listed:
        if not raw:
            continue
        name = raw.decode()
        source = ROOT / name
        if not source.is_file() or source.is_symlink():
            continue
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def run_one(mutation: Mutation, python: str) -> tuple[bool, str]:
    """(caught, detail): whether the guarding tests failed on the broken copy."""
    problem = check_applies(mutation)
    if problem is not None:
        return False, f"does not apply: {problem}"
    with tempfile.TemporaryDirectory(prefix=f"lre-mutation-{mutation.name}-") as tmp:
        copy = Path(tmp) / "tree"
        scratch_copy(copy)
        path = copy / mutation.file
        path.write_text(path.read_text().replace(mutation.old, mutation.new, 1))
        env = {**os.environ, "PYTHONPATH": str(copy)}
        env.pop("CI", None)  # a skip is not a catch either way; see below
        which = subprocess.run(
            [python, "-c", "import lre, sys; print(lre.__file__)"],
            cwd=copy, env=env, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        if not which.startswith(str(copy)):
            return False, f"the copy's lre is not the one imported ({which})"
        started = time.monotonic()
        done = subprocess.run(
            # -n 0: under xdist, -x stops the run as "interrupted" (exit 2)
            [python, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider",
             f"--basetemp={tmp}/pytest", *mutation.tests],
            cwd=copy, env=env, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        took = time.monotonic() - started
        last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
        # exit 1: tests failed (caught); 0: all passed (not caught); others:
        # collection errors, no tests (5), interrupted: not a catch.
        return done.returncode == 1, f"exit {done.returncode} in {took:.0f} s: {last}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and stop")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.names or m.name in args.names]
    if args.list:
        for mutation in MUTATIONS:
            print(f"{mutation.name:32} {mutation.what}")
        return 0
    python = sys.executable
    missed = 0
    for mutation in chosen:
        caught, detail = run_one(mutation, python)
        missed += not caught
        print(f"{'caught' if caught else 'MISSED':6}  {mutation.name:32} {detail}", flush=True)
    print(f"{len(chosen) - missed} caught, {missed} missed")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
