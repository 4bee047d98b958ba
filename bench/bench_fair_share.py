"""Two and three builds at once through one lre, with real Bazel: fair shares.

A big build A (``--a-actions`` genrules of ``sleep --seconds``, default 400 x
0.5 s, Bazel ``--jobs`` ``--a-jobs``) starts first; ``--delay`` seconds after
``--queued`` of A's actions wait in lre's queue (read from ``/status``), a
small build B (``--b-actions``, its own workspace and Bazel server) starts.
Each ``--reps`` times (medians reported): ``a_alone``, ``b_alone`` and
``buck2_alone`` (scenario ``alone``); ``bazel``: A, then B; ``buck2``: A, then
B from a Buck2-shaped client (Buck2's ``RequestMetadata``, a GetActionResult
miss then Execute per action, all at once); ``three``: A, then B and a second
small Bazel build C together; ``fair_off`` (``--fair-off-reps``): A then B
with ``fair_share.enabled: false``. ``--scenarios`` picks among ``alone``,
``bazel``, ``buck2`` and ``three``.

Targets: B's wall within 1.5x of (B alone + one A action); A's wall longer
than alone by no more than B's share (B's action-seconds over the slots),
and compared with A beside B with fair sharing off. Every genrule carries a
fresh salt (and ``--noremote_accept_cached``); a failed build raises
``RuntimeError`` with the tail of Bazel's output. lre runs from this
checkout with the bench's config (``_client.local_config``: 3 slots on 2
cores unless ``--slots``); the Bazel servers are shut down at the end.

    .venv/bin/python bench/bench_fair_share.py --reps 3 [--fair-off-reps 1] [--slots 6]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._client import LreProcess, ReapiClient, free_port, local_config
from lre.proto import REQUEST_METADATA_KEY, re_grpc, re_pb2
from tests.e2e._bazel import BazelSession


def write_workspace(root: Path, name: str, count: int, seconds: float, salt: str) -> None:
    """``count`` genrules that sleep ``seconds`` and write a line; ``//:all`` names them."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "WORKSPACE").write_text(f'workspace(name = "{name}")\n')
    rules = [
        f'genrule(name = "{name}{i}", outs = ["{name}{i}.txt"], '
        f'cmd = "sleep {seconds} && echo {salt} {i} > $@")'
        for i in range(count)
    ]
    names = ", ".join(f'":{name}{i}"' for i in range(count))
    rules.append(f'filegroup(name = "all", srcs = [{names}])')
    (root / "BUILD").write_text("\n".join(rules) + "\n")


class BazelBuild:
    """One workspace and its Bazel server; ``run`` rewrites the salt and builds."""

    def __init__(self, work: Path, name: str, count: int, seconds: float, flags: list[str]):
        self.root = work / name
        self.name, self.count, self.seconds, self.flags = name, count, seconds, flags
        write_workspace(self.root, name, count, seconds, "warm")
        self.session = BazelSession(self.root, work / f"{name}-bazel-root", max_idle_secs=900)

    def run(self, jobs: int) -> float:
        """Wall seconds of one build whose every action executes in lre."""
        write_workspace(self.root, self.name, self.count, self.seconds, uuid.uuid4().hex)
        start = time.monotonic()
        result = self.session.build(["//:all"], [*self.flags, f"--jobs={jobs}"])
        elapsed = time.monotonic() - start
        if result.returncode != 0 or result.summary is None:
            tail = "\n".join(result.output.splitlines()[-30:])
            raise RuntimeError(f"bazel build of {self.name} failed:\n{tail}")
        if result.summary.count("remote") != self.count:
            raise RuntimeError(f"{self.name}: not every action ran in lre: {result.summary}")
        return elapsed


def buck2_shaped(address: str, count: int, seconds: float) -> float:
    """Wall seconds of ``count`` sleeps sent at once as Buck2 sends actions."""

    async def main() -> float:
        client = ReapiClient(address)
        cache = re_grpc.ActionCacheStub(client.channel)
        meta = re_pb2.RequestMetadata(
            tool_details=re_pb2.ToolDetails(tool_name="buck2", tool_version="2025-01-01"),
            tool_invocation_id=str(uuid.uuid4()),
        )
        metadata = ((REQUEST_METADATA_KEY, meta.SerializeToString()),)
        salt = uuid.uuid4().hex

        async def one(i: int) -> None:
            digest = await client.prepare(
                ["/bin/sh", "-c", f"sleep {seconds}; : {salt} {i}"], do_not_cache=False
            )
            try:
                await cache.GetActionResult(
                    re_pb2.GetActionResultRequest(action_digest=digest), metadata=metadata
                )
                raise RuntimeError("a new action was in the cache")
            except Exception as error:  # a NOT_FOUND is the expected miss
                if "NOT_FOUND" not in str(error):
                    raise
            response = await client.execute(digest, metadata)
            if response.status.code != 0 or response.result.exit_code != 0:
                raise RuntimeError(f"buck2-shaped action failed: {response}")

        start = time.monotonic()
        try:
            await asyncio.gather(*(one(i) for i in range(count)))
        finally:
            await client.close()
        return time.monotonic() - start

    return asyncio.run(main())


def queued_in_lre(status_address: str) -> int:
    """How many actions wait in lre's queue now (its ``/status``)."""
    with urllib.request.urlopen(f"http://{status_address}/status", timeout=10) as reply:
        return int(json.loads(reply.read())["queued"])


def together(
    first: Callable[[], float],
    later: list[Callable[[], float]],
    delay: float,
    ready: Callable[[], bool],
) -> list[float]:
    """Run ``first``; once ``ready()`` (polled, at most 5 minutes) and ``delay``
    s later each of ``later`` at once. Their walls, ``first``'s first."""
    results: dict[int, float] = {}
    errors: list[BaseException] = []

    def call(index: int, fn: Callable[[], float]) -> None:
        try:
            results[index] = fn()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=call, args=(0, first))]
    threads[0].start()
    deadline = time.monotonic() + 300
    while not ready() and not errors:
        if time.monotonic() > deadline:
            raise RuntimeError("the first build never queued enough actions in lre")
        time.sleep(0.1)
    time.sleep(delay)
    for i, fn in enumerate(later, 1):
        threads.append(threading.Thread(target=call, args=(i, fn)))
        threads[-1].start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [results[i] for i in range(len(threads))]


def run_rounds(
    args: argparse.Namespace,
    address: str,
    builds: tuple[BazelBuild, BazelBuild, BazelBuild],
    fair: bool,
    rep: int,
    add: Callable[[str, float], None],
    status_address: str,
) -> None:
    """Round ``rep`` of every scenario in ``args.scenarios`` (see the module
    docstring) against ``address``."""
    a, b, c = builds

    enough: int = args.queued

    def ready() -> bool:
        return queued_in_lre(status_address) >= enough

    b_jobs = max(16, args.b_actions)

    def big() -> float:
        return a.run(args.a_jobs)

    def small() -> float:
        return b.run(b_jobs)

    def other() -> float:
        return c.run(b_jobs)

    def buck2() -> float:
        return buck2_shaped(address, args.b_actions, args.seconds)

    print(f"round {rep + 1} (fair share {'on' if fair else 'off'})", flush=True)
    if not fair:
        walls = together(big, [small], args.delay, ready)
        add("fair_off_a", walls[0])
        add("fair_off_b", walls[1])
        return
    if "alone" in args.scenarios:
        add("a_alone", big())
        add("b_alone", small())
        add("buck2_alone", buck2())
    if "bazel" in args.scenarios:
        walls = together(big, [small], args.delay, ready)
        add("bazel_a", walls[0])
        add("bazel_b", walls[1])
    if "buck2" in args.scenarios:
        walls = together(big, [buck2], args.delay, ready)
        add("buck2_a", walls[0])
        add("buck2_b", walls[1])
    if "three" in args.scenarios:
        walls = together(big, [small, other], args.delay, ready)
        add("three_a", walls[0])
        add("three_b", walls[1])
        add("three_c", walls[2])


class Side:
    """One lre (fair share on or off) and its three workspaces."""

    def __init__(
        self, stack: ExitStack, args: argparse.Namespace, work: Path, name: str, fair: bool
    ) -> None:
        self.name, self.fair = name, fair
        home = work / f"lre-{name or 'x'}-{fair}"
        worker = None
        if args.slots:
            worker = {"resources": {"cpu_count": args.slots, "cpu_overcommit": 1.0}}
        config = json.loads(local_config(home, worker))
        self.status_address = f"127.0.0.1:{free_port()}"
        config["global"]["status"]["address"] = self.status_address
        if not fair:
            config["schedulers"][1]["simple"]["fair_share"] = {"enabled": False}
        self.lre = stack.enter_context(LreProcess(json.dumps(config), home))
        flags = [
            f"--remote_executor=grpc://{self.lre.address}",
            "--spawn_strategy=remote",
            "--genrule_strategy=remote",
            "--noremote_accept_cached",
            "--remote_timeout=600",
        ]
        tag = f"{name.lower()}{int(fair)}"
        self.builds = (
            BazelBuild(work, f"a{tag}", args.a_actions, args.seconds, flags),
            BazelBuild(work, f"b{tag}", args.b_actions, args.seconds, flags),
            BazelBuild(work, f"c{tag}", args.b_actions, args.seconds, flags),
        )
        stack.callback(self.shut_down)
        for build in self.builds:  # Bazel servers up, analysis warm
            build.run(16)

    def shut_down(self) -> None:
        for build in self.builds:
            build.session.run("shutdown")


def checks_of(args: argparse.Namespace, m: dict[str, float]) -> dict[str, tuple[float, float]]:
    """The targets (module docstring) whose figures were measured, as (value, limit)."""
    if "a_alone" not in m:
        return {}
    slots = args.slots or 3
    one = args.seconds
    limit = 1.5 * (m["b_alone"] + one)
    limit_buck2 = 1.5 * (m["buck2_alone"] + one)
    b_share = args.b_actions * one / slots
    wanted = {
        "bazel B within 1.5x (B alone + one A action)": ("bazel_b", None, limit),
        "buck2 B within 1.5x (B alone + one A action)": ("buck2_b", None, limit_buck2),
        "three: B within 1.5x": ("three_b", None, limit),
        "three: C within 1.5x": ("three_c", None, limit),
        "A longer by at most B's share (bazel)": ("bazel_a", "a_alone", b_share),
        "A longer by at most B's share (buck2)": ("buck2_a", "a_alone", b_share),
        "A longer by at most B's and C's share": ("three_a", "a_alone", 2 * b_share),
        # Both runs carry B's Bazel server on the same cores and B's actions
        # in the same slots; only the order of the queue differs.
        "A with B: fair share on vs off": ("bazel_a", "fair_off_a", b_share),
    }
    checks = {}
    for name, (key, base, lim) in wanted.items():
        if key in m and (base is None or base in m):
            checks[name] = (m[key] - (m[base] if base else 0.0), lim)
    return checks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--fair-off-reps", type=int, default=1)
    ap.add_argument("--a-actions", type=int, default=400)
    ap.add_argument("--b-actions", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.5, help="each action's sleep")
    ap.add_argument("--a-jobs", type=int, default=200)
    ap.add_argument("--delay", type=float, default=2.0)
    ap.add_argument("--queued", type=int, default=50, help="A's actions queued before B waits")
    ap.add_argument("--scenarios", default="alone,bazel,buck2,three")
    ap.add_argument(
        "--slots",
        type=int,
        default=0,
        help="lre's slots (one CPU each); 0: lre's default for this machine (3 on 2 cores)",
    )
    args = ap.parse_args()
    args.scenarios = set(args.scenarios.split(","))
    if not args.scenarios <= {"alone", "bazel", "buck2", "three"}:
        ap.error(f"--scenarios: unknown {sorted(args.scenarios)}")

    samples: dict[str, list[float]] = {}

    with tempfile.TemporaryDirectory(prefix="lre-fair-") as tmp:
        work = Path(tmp)
        plan = [("", True, args.reps), ("", False, args.fair_off_reps)]
        with ExitStack() as stack:
            sides = [Side(stack, args, work, name, fair) for name, fair, reps in plan if reps]
            rounds = max((reps for _, _, reps in plan), default=0)
            for rep in range(rounds):
                order = sides if rep % 2 == 0 else sides[::-1]
                for side in order:
                    if rep >= (args.reps if side.fair else args.fair_off_reps):
                        continue

                    def add(key: str, value: float) -> None:
                        samples.setdefault(key, []).append(value)
                        print(f"  {key}: {value:.2f} s", flush=True)

                    run_rounds(
                        args,
                        side.lre.address,
                        side.builds,
                        side.fair,
                        rep,
                        add,
                        side.status_address,
                    )

    medians = {k: statistics.median(v) for k, v in samples.items()}
    for key, value in medians.items():
        print(f"median {key}: {value:.2f} s")
    for name, (value, lim) in checks_of(args, medians).items():
        verdict = "met" if value <= lim else "NOT met"
        print(f"{name}: {value:.2f} s (limit {lim:.2f} s) {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
