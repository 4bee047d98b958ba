"""Crash safety with executions: SIGKILL ``lre up`` while actions run and
uploads stream in, restart it on the same directories, check what it serves.

A cycle (``exec_crash_cycle``) starts lre (``tests.reliability._crash``'s
``LreProcess``), checks that the work directory holds nothing of the dead
run, checks the CAS and action cache (``verify_bounded``), runs one new
Execute, then loads it with ByteStream/BatchUpdate uploads and action-cache
updates (``_crash.load``), executions with file and directory outputs, and
long actions that leave a file in their action directory and sleep with a
marker argument; once the long actions are executing it SIGKILLs lre at a
random moment. After the kill no process with the marker may survive (the
parent-death signal).

Verification is bounded so a long run stays fast: presence of every blob ever
attempted is checked with FindMissingBlobs (cheap), but only the blobs,
action-cache entries and executions of the last ``recent`` cycles plus a
random sample of older ones are read back and hashed. The final check after
the last cycle reads everything.

The test here runs a few cycles.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest

from lre.proto import bs_grpc, bs_pb2, re_grpc, re_pb2
from tests._support.configs import WORKER_EXTRA, app_config_text
from tests._support.processes import processes_with
from tests._support.reapi import Client, Stage, metadata_of, open_channel, response_of
from tests.reliability._crash import INSTANCE, Ledger, LreProcess, key, load
from tests.reliability.test_execute_faults import leftovers

OK = grpc.StatusCode.OK.value[0]
Key = tuple[str, int]


def crash_config(root: Path, *, max_inflight: int = 8, cas_bytes: str = "4GiB") -> str:
    """``app_config_text`` with the integration worker properties, room for the
    long actions and the short ones side by side (16 CPUs, 16 GiB: the
    learned reservation of a short ``sh`` action can exceed one CPU), and a
    CAS cap large enough that nothing acknowledged is evicted in the run."""
    return app_config_text(
        root,
        max_inflight=max_inflight,
        extra_worker=WORKER_EXTRA,
        resources='cpu_count: 16, memory_budget: "16GiB"',
        cas_bytes=cas_bytes,
    )


# ------------------------------------------------------------------ what the clients did


@dataclass
class Executions:
    """Actions the execution clients submitted (thread-safe)."""

    #: action key -> (action digest, cycle it was submitted in)
    submitted: dict[Key, tuple[re_pb2.Digest, int]] = field(default_factory=dict)
    #: Execute answered OK with exit 0 and a result: the action cache must keep it.
    acknowledged: set[Key] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def submit(self, d: re_pb2.Digest, cycle: int) -> None:
        with self.lock:
            self.submitted[key(d)] = (d, cycle)

    def ack(self, d: re_pb2.Digest) -> None:
        with self.lock:
            self.acknowledged.add(key(d))


#: Shell snippets of the executions: random bytes into a file or a directory.
FILE_ACTION = "mkdir -p out; head -c {size} /dev/urandom > out/f; echo wrote {size}"
DIR_ACTION = "mkdir -p out/d; head -c {size} /dev/urandom > out/d/a; echo b > out/d/b; echo dir"
SIZES = (0, 1, 100, 40_000, 300_000, 1_500_000)


def execution_load(
    address: str, executions: Executions, stop: threading.Event, seed: int, cycle: int
) -> int:
    """Execute short actions with outputs until ``stop`` or the server dies; calls made."""
    rng = random.Random(seed)
    client = Client(address)
    calls = 0
    try:
        while not stop.is_set():
            size = rng.choice(SIZES)
            if rng.random() < 0.5:
                script, outputs = FILE_ACTION.format(size=size), ["out/f"]
            else:
                script, outputs = DIR_ACTION.format(size=size), ["out/d"]
            try:
                prepared = client.prepare(["/bin/sh", "-c", script], output_paths=outputs)
                executions.submit(prepared.action_digest, cycle)
                operations = client.execute(prepared, timeout=60)
            except grpc.RpcError:
                return calls  # the server was killed
            response = response_of(operations[-1])
            if response.status.code == OK and response.result.exit_code == 0:
                executions.ack(prepared.action_digest)
            calls += 1
    finally:
        client.close()
    return calls


def long_action(address: str, marker: str, background: bool, started: threading.Event) -> None:
    """One action that writes a file into its directory (its TMPDIR, on disk;
    its input root's writes are on its view's tmpfs) and sleeps ~1000 s
    (``marker`` in its arguments); with ``background`` the sleep runs in a
    background child of the shell too. Returns when the server dies."""
    sleep = f"sleep {marker} & sleep {marker}; wait" if background else f"exec sleep {marker}"
    client = Client(address)
    try:
        prepared = client.prepare(["/bin/sh", "-c", f'echo left-behind > "$TMPDIR/left"; {sleep}'])
        for operation in client.execution.Execute(client.execute_request(prepared), timeout=600):
            if metadata_of(operation).stage == Stage.EXECUTING:
                started.set()
    except grpc.RpcError:
        pass
    finally:
        client.close()


def new_marker() -> str:
    """A ``sleep`` duration of about 1000 s no other process uses."""
    return f"1000.{uuid.uuid4().int % 10**12:012d}"


def kill_all(processes: Iterable[psutil.Process]) -> None:
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


# ------------------------------------------------------------------ checks


@dataclass
class Check:
    """Result of ``verify_bounded``: counts and the problems found."""

    present: int = 0
    hashed: int = 0
    results_checked: int = 0
    results_found: int = 0
    problems: list[str] = field(default_factory=list)


def _read(bytestream: Any, d: re_pb2.Digest) -> bytes:
    if d.size_bytes == 0:
        return b""
    name = f"{INSTANCE}/blobs/{d.hash}/{d.size_bytes}"
    return b"".join(
        r.data for r in bytestream.Read(bs_pb2.ReadRequest(resource_name=name), timeout=60)
    )


def _matches(data: bytes, d: re_pb2.Digest) -> bool:
    return len(data) == d.size_bytes and hashlib.sha256(data).hexdigest() == d.hash


def _pick(keys: Sequence[Key], recent: int, sample: int, rng: random.Random) -> list[Key]:
    """The last ``recent`` of ``keys`` (oldest first) and ``sample`` random
    others; everything when ``recent < 0``."""
    if recent < 0 or len(keys) <= recent:
        return list(keys)
    cut = len(keys) - recent
    older = keys[:cut]
    return rng.sample(older, min(sample, len(older))) + list(keys[cut:])


def verify_bounded(
    address: str,
    ledger: Ledger,
    executions: Executions,
    *,
    recent: int,
    sample: int,
    rng: random.Random,
) -> Check:
    """Check the (restarted) server at ``address``.

    - Every blob ever attempted: FindMissingBlobs; every acknowledged one must
      be present.
    - Read and hash: the ``recent`` present blobs attempted last (those in
      flight around the kill) plus ``sample`` random older ones; ``recent < 0``
      reads all of them.
    - Action-cache entries written by clients (``ledger.actions``) and
      executions, chosen the same way: a GetActionResult that succeeds must
      reference only blobs that are present and hash to their digest (output
      files, stdout/stderr, output directory trees and their files); an
      acknowledged one must be found.
    """
    check = Check()
    with open_channel(address) as ch:
        cas = re_grpc.ContentAddressableStorageStub(ch)
        bytestream = bs_grpc.ByteStreamStub(ch)
        ac = re_grpc.ActionCacheStub(ch)
        with ledger.lock:
            attempted = dict(ledger.attempted)
            acknowledged = set(ledger.acknowledged)
            actions = dict(ledger.actions)
            actions_acknowledged = set(ledger.actions_acknowledged)
        with executions.lock:
            submitted = dict(executions.submitted)
            executed = set(executions.acknowledged)

        present = _present(cas, list(attempted.values()))
        check.present = len(present)
        lost = acknowledged - present
        if lost:
            check.problems.append(f"{len(lost)} acknowledged blobs are gone, e.g. {min(lost)}")
        for k in _pick([k for k in attempted if k in present], recent, sample, rng):
            if not _matches(_read(bytestream, attempted[k]), attempted[k]):
                check.problems.append(f"blob {k} reads back wrong bytes")
            check.hashed += 1

        def result_of(d: re_pb2.Digest) -> re_pb2.ActionResult | None:
            try:
                reply: re_pb2.ActionResult = ac.GetActionResult(
                    re_pb2.GetActionResultRequest(instance_name=INSTANCE, action_digest=d),
                    timeout=30,
                )
                return reply
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.NOT_FOUND:
                    check.problems.append(f"GetActionResult {key(d)}: {error.code()}")
                return None

        chosen_actions = _pick(list(actions), recent, sample, rng)
        chosen_execs = _pick(list(submitted), recent, sample, rng)
        todo = [(k, actions[k], k in actions_acknowledged) for k in chosen_actions] + [
            (k, submitted[k][0], k in executed) for k in chosen_execs
        ]
        gone: list[Key] = []
        for k, d, must_exist in todo:
            check.results_checked += 1
            result = result_of(d)
            if result is None:
                if must_exist:
                    gone.append(k)
                continue
            check.results_found += 1
            for problem in _incomplete(cas, bytestream, result):
                check.problems.append(f"action {k}: {problem}")
        if gone:
            check.problems.append(
                f"{len(gone)} acknowledged action results are gone, e.g. {gone[0]}"
            )
    return check


def _present(cas: Any, digests: list[re_pb2.Digest]) -> set[Key]:
    present: set[Key] = set()
    for start in range(0, len(digests), 5000):
        part = digests[start : start + 5000]
        missing = cas.FindMissingBlobs(
            re_pb2.FindMissingBlobsRequest(instance_name=INSTANCE, blob_digests=part), timeout=60
        ).missing_blob_digests
        absent = {key(m) for m in missing}
        present.update(key(d) for d in part if key(d) not in absent)
    return present


def _incomplete(cas: Any, bytestream: Any, result: re_pb2.ActionResult) -> list[str]:
    """What is wrong with the blobs ``result`` references (empty: nothing)."""
    problems = []
    referenced = [f.digest for f in result.output_files]
    for d in (result.stdout_digest, result.stderr_digest):
        if d.hash:
            referenced.append(d)
    for directory in result.output_directories:
        data = (
            _read(bytestream, directory.tree_digest) if _has(cas, directory.tree_digest) else None
        )
        if data is None or not _matches(data, directory.tree_digest):
            problems.append(f"output directory {directory.path}: tree blob missing or wrong")
            continue
        tree = re_pb2.Tree.FromString(data)
        for node in [tree.root, *tree.children]:
            referenced.extend(f.digest for f in node.files)
    for d in referenced:
        if not _has(cas, d):
            problems.append(f"references missing blob {key(d)}")
        elif not _matches(_read(bytestream, d), d):
            problems.append(f"references blob {key(d)} with wrong content")
    return problems


def _has(cas: Any, d: re_pb2.Digest) -> bool:
    missing = cas.FindMissingBlobs(
        re_pb2.FindMissingBlobsRequest(instance_name=INSTANCE, blob_digests=[d]), timeout=30
    ).missing_blob_digests
    return not missing


def probe_execute(address: str) -> str:
    """One new Execute on the restarted server; '' when it works, else what failed."""
    client = Client(address)
    try:
        word = uuid.uuid4().hex
        response = client.run(
            ["/bin/sh", "-c", f"mkdir -p out; echo {word} > out/w"], output_paths=["out/w"]
        )
        if response.status.code != OK or response.result.exit_code != 0:
            return f"probe Execute failed: {response.status} exit {response.result.exit_code}"
        (output,) = response.result.output_files
        if client.read(output.digest) != f"{word}\n".encode():
            return "probe Execute output reads back wrong"
        return ""
    finally:
        client.close()


# ------------------------------------------------------------------ one cycle


@dataclass
class CycleReport:
    cycle: int
    check: Check
    upload_calls: int
    executions: int
    kill_after_s: float
    long_actions: int
    leftovers_before_restart: int
    leftovers_after_restart: list[str]
    #: command lines of action leaders alive 5 s after the kill (must be none)
    survivors: list[str]
    #: background children of actions alive 5 s after the kill (the process
    #: guardian kills them; must be none)
    orphans: int
    problems: list[str]
    #: wall time of the phases: start, check (verify + probe), load until the kill
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class CrashRun:
    """State carried across cycles of one crash run on one directory."""

    lre: LreProcess
    rng: random.Random
    ledger: Ledger = field(default_factory=Ledger)
    executions: Executions = field(default_factory=Executions)
    cycle: int = 0
    leftovers_at_kill: int = 0

    @property
    def work(self) -> Path:
        return self.lre.root / "work" / "local"


def exec_crash_cycle(
    run: CrashRun,
    *,
    upload_threads: int = 2,
    exec_threads: int = 2,
    long_actions: int = 2,
    background_actions: int = 1,
    recent: int = 200,
    sample: int = 40,
) -> CycleReport:
    """Start, check, load, SIGKILL (see the module docstring)."""
    run.cycle += 1
    cycle = run.cycle
    rng = run.rng
    problems: list[str] = []
    t0 = time.monotonic()
    address = run.lre.start()
    t1 = time.monotonic()
    after_restart = leftovers(run.work)
    if after_restart:
        problems.append(f"work directory keeps {len(after_restart)} leftovers of the dead run")
    check = verify_bounded(
        address, run.ledger, run.executions, recent=recent, sample=sample, rng=rng
    )
    problems += check.problems
    probe = probe_execute(address)
    if probe:
        problems.append(probe)
    t2 = time.monotonic()

    marker = new_marker()  # leaders: ``exec sleep``
    background_marker = new_marker()  # children the shell started in the background
    stop = threading.Event()
    counts: dict[str, list[int]] = {"upload": [], "exec": []}

    def uploads(seed: int) -> None:
        counts["upload"].append(load(address, run.ledger, stop, seed))

    def execs(seed: int) -> None:
        counts["exec"].append(execution_load(address, run.executions, stop, seed, cycle))

    started = [threading.Event() for _ in range(long_actions + background_actions)]
    threads = [
        threading.Thread(target=long_action, args=(address, marker, False, started[i]))
        for i in range(long_actions)
    ]
    threads += [
        threading.Thread(
            target=long_action, args=(address, background_marker, True, started[long_actions + i])
        )
        for i in range(background_actions)
    ]
    threads += [
        threading.Thread(target=uploads, args=(rng.randrange(1 << 30),))
        for _ in range(upload_threads)
    ]
    threads += [
        threading.Thread(target=execs, args=(rng.randrange(1 << 30),)) for _ in range(exec_threads)
    ]
    survivors: list[psutil.Process] = []
    orphans: list[psutil.Process] = []
    began = time.monotonic()
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        for event in started:
            event.wait(max(0.0, deadline - time.monotonic()))
        running = sum(event.is_set() for event in started)
        if running < len(started):
            problems.append(f"only {running} of {len(started)} long actions started within 30 s")
        time.sleep(rng.uniform(0.0, 1.5))
    finally:
        moment = time.monotonic() - began
        run.lre.kill()
        stop.set()
        for thread in threads:
            thread.join(60)
        # The parent-death signal and the guardian act at once; allow a moment.
        deadline = time.monotonic() + 5
        while (processes_with(marker) or processes_with(background_marker)) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.05)
        survivors = processes_with(marker)
        orphans = processes_with(background_marker)
        kill_all(survivors + orphans)  # never leave them behind, whatever the verdict
    left = len(leftovers(run.work))
    run.leftovers_at_kill = left
    if survivors:
        problems.append(
            f"{len(survivors)} action processes survived the SIGKILL of lre: "
            + ", ".join(" ".join(p.info["cmdline"] or []) for p in survivors)
        )
    return CycleReport(
        cycle=cycle,
        check=check,
        upload_calls=sum(counts["upload"]),
        executions=sum(counts["exec"]),
        kill_after_s=moment,
        long_actions=long_actions,
        leftovers_before_restart=left,
        leftovers_after_restart=after_restart,
        survivors=[" ".join(p.info["cmdline"] or []) for p in survivors],
        orphans=len(orphans),
        problems=problems,
        seconds={"start": t1 - t0, "check": t2 - t1, "load": time.monotonic() - t2},
    )


def final_check(run: CrashRun) -> tuple[Check, list[str]]:
    """A last start: work directory clean, full verification (every blob and
    result read), a new Execute works, then a clean SIGTERM stop."""
    problems: list[str] = []
    address = run.lre.start()
    try:
        after_restart = leftovers(run.work)
        if after_restart:
            problems.append(f"work directory keeps {len(after_restart)} leftovers")
        check = verify_bounded(
            address, run.ledger, run.executions, recent=-1, sample=0, rng=run.rng
        )
        problems += check.problems
        probe = probe_execute(address)
        if probe:
            problems.append(probe)
    finally:
        status = run.lre.stop()
    if status != 0:
        problems.append(f"lre did not stop cleanly (status {status}):\n{run.lre.tail()}")
    return check, problems


# ------------------------------------------------------------------ the test


@pytest.mark.slow
def test_sigkill_during_executions(tmp_path: Path) -> None:
    run = CrashRun(LreProcess(tmp_path, crash_config(tmp_path)), random.Random(11))
    try:
        reports = [exec_crash_cycle(run) for _ in range(3)]
        final, final_problems = final_check(run)
    finally:
        run.lre.kill()
    for report in reports:
        assert report.problems == [], report
        assert report.survivors == []
        assert report.orphans == 0, report
        # The dead run did leave files (the long actions wrote one each), and
        # the restart removed them.
        assert report.leftovers_before_restart >= report.long_actions, report
    assert final_problems == []
    assert sum(r.executions for r in reports) > 0, "no execution finished; the test proved nothing"
    assert run.executions.acknowledged and final.results_found >= len(run.executions.acknowledged)
    assert final.hashed == final.present


@pytest.mark.slow
def test_sigkill_of_lre_kills_the_background_children_of_actions(tmp_path: Path) -> None:
    lre = LreProcess(tmp_path, crash_config(tmp_path))
    marker = new_marker()
    try:
        address = lre.start()
        started = threading.Event()
        client = threading.Thread(target=long_action, args=(address, marker, True, started))
        client.start()
        assert started.wait(60), "the action never started"
        deadline = time.monotonic() + 10
        while len(processes_with(marker)) < 3 and time.monotonic() < deadline:  # sh + 2 sleeps
            time.sleep(0.05)
        assert len(processes_with(marker)) == 3, processes_with(marker)
        lre.kill()
        client.join(30)
        # No restart needed: the process guardian kills the group once lre is gone.
        deadline = time.monotonic() + 5
        while processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        without_restart = [" ".join(p.info["cmdline"] or []) for p in processes_with(marker)]
        lre.start()  # and a restart on the same directories finds nothing left
        survivors = [" ".join(p.info["cmdline"] or []) for p in processes_with(marker)]
    finally:
        lre.kill()
        kill_all(processes_with(marker))
    assert without_restart == []
    assert survivors == []
