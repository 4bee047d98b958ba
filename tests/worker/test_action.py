"""ActionRunner with real processes and a real MemoryStore."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio

from lre.cas import MemoryStore, read_bytes, read_message, write_message
from lre.config import JobserverSpec
from lre.digest import EMPTY_DIGEST, Digest
from lre.errors import DeadlineExceeded, InvalidArgument, MissingBlobs
from lre.proto import lre_pb2, re_pb2
from lre.scheduler import Completed
from lre.worker._action import ActionRunner, RunnerContext
from lre.worker.directories._workdir import WorkDirectory
from tests._support.actions import File, Link

from .conftest import Env, make_lease, make_spec


async def blob(store: MemoryStore, digest: re_pb2.Digest) -> bytes:
    return await read_bytes(store, Digest.from_proto(digest))


async def run(context: Env, *args: object, **kwargs: object) -> Completed:
    lease = await make_lease(context.store, *args, **kwargs)  # type: ignore[arg-type]
    outcome = await context.runner.run(lease)
    assert isinstance(outcome, Completed), outcome
    return outcome


async def test_c_compile_with_gcc(env: Env) -> None:
    gcc = shutil.which("gcc")
    assert gcc, "gcc is required for this test"
    source = b'#include <stdio.h>\nint main(void){puts("compiled ok");return 0;}\n'
    outcome = await run(
        env,
        ["gcc", "-o", "out/hello", "src/hello.c"],
        inputs={"src": {"hello.c": source}},
        output_paths=("out/hello",),
    )
    assert outcome.error is None and outcome.result.exit_code == 0
    (output,) = outcome.result.output_files
    assert output.path == "out/hello" and output.is_executable
    binary = await blob(env.store, output.digest)
    assert binary.startswith(b"\x7fELF")


async def test_shell_pipeline_and_stdout(env: Env) -> None:
    outcome = await run(
        env,
        ["/bin/sh", "-c", "cat words | tr a-z A-Z | sort | tee sorted; echo oops >&2"],
        inputs={"words": b"pear\napple\n"},
        output_paths=("sorted",),
    )
    assert outcome.result.exit_code == 0
    assert await blob(env.store, outcome.result.stdout_digest) == b"APPLE\nPEAR\n"
    assert await blob(env.store, outcome.result.stderr_digest) == b"oops\n"
    assert await blob(env.store, outcome.result.output_files[0].digest) == b"APPLE\nPEAR\n"
    assert outcome.result.stdout_raw == b""  # not inlined unless asked


async def test_inline_stdout_when_asked(env: Env) -> None:
    outcome = await run(env, ["/bin/echo", "hi"], inline=True)
    assert outcome.result.stdout_raw == b"hi\n"
    assert outcome.result.HasField("stdout_digest")


async def test_outputs_of_every_kind(env: Env) -> None:
    script = (
        "mkdir -p tree/a/b tree/c && echo 1 > tree/a/b/f && echo 1 > tree/c/f && "
        "echo x > tree/top && chmod +x tree/top && ln -s a/b/f tree/rel && "
        "echo data > file && printf '#!/bin/sh\\n' > tool && chmod 755 tool && "
        "ln -s file link && mkdir -p tree/empty1 tree/c/empty2"
    )
    outcome = await run(
        env,
        ["/bin/sh", "-c", script],
        output_paths=("file", "tool", "tree", "link", "missing"),
    )
    result = outcome.result
    files = {f.path: f for f in result.output_files}
    assert set(files) == {"file", "tool"}
    assert not files["file"].is_executable and files["tool"].is_executable
    assert [(s.path, s.target) for s in result.output_symlinks] == [("link", "file")]
    assert [s.path for s in result.output_file_symlinks] == ["link"]
    (directory,) = result.output_directories
    assert directory.path == "tree" and directory.is_topologically_sorted
    tree = await read_message(env.store, Digest.from_proto(directory.tree_digest), re_pb2.Tree)
    root = tree.root
    assert [f.name for f in root.files] == ["top"] and root.files[0].is_executable
    assert [(s.name, s.target) for s in root.symlinks] == [("rel", "a/b/f")]
    assert [d.name for d in root.directories] == ["a", "c", "empty1"]
    # Children deduplicated (the two empty dirs are one Directory; "b" and "c"
    # hold the same single file and are one too) and parents before children.
    serial = [c.SerializeToString(deterministic=True) for c in tree.children]
    assert len(serial) == len(set(serial))
    from lre.digest import digest_of

    position = {digest_of(s): i for i, s in enumerate(serial)}
    for i, child in enumerate(tree.children):
        for sub in child.directories:
            assert position[Digest.from_proto(sub.digest)] > i
    # Every blob the Tree names is in the CAS.
    assert Digest.from_proto(directory.root_directory_digest) == digest_of(
        root.SerializeToString(deterministic=True)
    )
    leaf = await blob(env.store, tree.children[-1].files[0].digest)
    assert leaf == b"1\n"


async def test_legacy_output_fields(env: Env) -> None:
    outcome = await run(
        env,
        ["/bin/sh", "-c", "mkdir -p out/d && echo a > out/f && echo b > out/d/g && ln -s f out/l"],
        output_files=("out/f", "out/l"),
        output_directories=("out/d",),
    )
    result = outcome.result
    assert [f.path for f in result.output_files] == ["out/f"]
    assert [d.path for d in result.output_directories] == ["out/d"]
    assert [s.path for s in result.output_file_symlinks] == ["out/l"]
    assert [s.path for s in result.output_symlinks] == ["out/l"]


async def test_working_directory_and_output_paths_relative_to_it(env: Env) -> None:
    outcome = await run(
        env,
        ["/bin/sh", "-c", "pwd > ../where; cat input > result"],
        inputs={"pkg": {"sub": {"input": b"in"}}},
        working_directory="pkg/sub",
        output_paths=("result", "../where"),
    )
    files = {f.path: f for f in outcome.result.output_files}
    assert await blob(env.store, files["result"].digest) == b"in"
    where = (await blob(env.store, files["../where"].digest)).decode().strip()
    assert where.endswith("/root/pkg/sub")


async def test_environment_is_exactly_the_commands(tmp_path: Path, store: MemoryStore) -> None:
    from lre.config._worker_models import EnvironmentSource, JobserverSpec

    spec = make_spec(
        tmp_path,
        jobserver=JobserverSpec(enabled=False),
        additional_environment={
            "FIXED": EnvironmentSource(source="value", value="v"),
            "TIMEOUT": EnvironmentSource(source="timeout_millis"),
            "POOL": EnvironmentSource(source="property", value="pool"),
        },
    )
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store))
        lease = await make_lease(
            store,
            ["/usr/bin/env", "-0"],
            env={"A": "1", "B": "two words"},
            timeout_s=7,
            platform={"pool": "big"},
        )
        outcome = await runner.run(lease)
    assert isinstance(outcome, Completed)
    printed = (await blob(store, outcome.result.stdout_digest)).split(b"\0")
    variables = dict(item.decode().split("=", 1) for item in printed if item)
    # The private temporary directory is the one addition (private_tmp).
    tmp = {variables.pop(name) for name in ("TMPDIR", "TMP", "TEMP")}
    assert len(tmp) == 1
    (tmp_dir,) = tmp
    assert tmp_dir.startswith(str(workdir.path) + "/") and tmp_dir.endswith("/tmp")
    assert variables == {
        "A": "1",
        "B": "two words",
        "FIXED": "v",
        "TIMEOUT": "7000",
        "POOL": "big",
        "PATH": spec.default_path,
    }


async def test_a_pwd_the_command_gives_reaches_it_unchanged(
    tmp_path: Path, store: MemoryStore
) -> None:
    # A shell in front of the action (the view's /proc gate) sets and exports
    # PWD; the action must see the value its Command gave, not the cwd.

    spec = make_spec(tmp_path, jobserver=JobserverSpec(enabled=False))
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store))
        lease = await make_lease(store, ["/usr/bin/env", "-0"], env={"PWD": "/not/the/cwd"})
        outcome = await runner.run(lease)
    assert isinstance(outcome, Completed)
    printed = (await blob(store, outcome.result.stdout_digest)).split(b"\0")
    variables = dict(item.decode().split("=", 1) for item in printed if item)
    assert variables["PWD"] == "/not/the/cwd"


async def test_private_tmp_off_leaves_the_environment_alone(
    tmp_path: Path, store: MemoryStore
) -> None:
    from lre.config._worker_models import JobserverSpec

    spec = make_spec(tmp_path, jobserver=JobserverSpec(enabled=False), private_tmp=False)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store))
        lease = await make_lease(store, ["/usr/bin/env", "-0"], env={"A": "1"})
        outcome = await runner.run(lease)
    assert isinstance(outcome, Completed)
    printed = (await blob(store, outcome.result.stdout_digest)).split(b"\0")
    variables = dict(item.decode().split("=", 1) for item in printed if item)
    assert variables == {"A": "1", "PATH": spec.default_path}


async def test_command_tmpdir_wins_and_private_tmp_is_emptied(env: Env) -> None:
    own = await run(env, ["/bin/sh", "-c", "echo $TMPDIR $TMP"], env={"TMPDIR": "/var/tmp"})
    out = (await blob(env.store, own.result.stdout_digest)).decode().split()
    assert out[0] == "/var/tmp" and out[1].endswith("/tmp") and out[1] != "/var/tmp"
    # Files an action leaves in its TMPDIR are gone before the next action.
    first = await run(env, ["/bin/sh", "-c", "echo x > $TMPDIR/left; ls $TMPDIR"])
    assert await blob(env.store, first.result.stdout_digest) == b"left\n"
    for _ in range(3):
        again = await run(env, ["/bin/sh", "-c", "ls -A $TMPDIR"])
        assert await blob(env.store, again.result.stdout_digest) == b""


async def test_command_path_wins_over_default(env: Env) -> None:
    outcome = await run(env, ["/usr/bin/env"], env={"PATH": "/bin"})
    out = await blob(env.store, outcome.result.stdout_digest)
    assert b"PATH=/bin\n" in out


async def test_non_zero_exit_is_a_result_and_not_cached(env: Env) -> None:
    outcome = await run(env, ["/bin/sh", "-c", "echo bad >&2; exit 3"])
    assert outcome.error is None
    assert outcome.result.exit_code == 3
    assert await blob(env.store, outcome.result.stderr_digest) == b"bad\n"


async def test_killed_by_signal_is_reported(env: Env) -> None:
    outcome = await run(env, ["/bin/sh", "-c", "kill -SEGV $$"])
    assert outcome.result.exit_code == 128 + 11
    assert "SIGSEGV" in outcome.message


async def test_timeout_keeps_partial_output(env: Env) -> None:
    outcome = await run(env, ["/bin/sh", "-c", "echo started; sleep 30; echo never"], timeout_s=2.0)
    assert isinstance(outcome.error, DeadlineExceeded)
    assert await blob(env.store, outcome.result.stdout_digest) == b"started\n"
    assert outcome.result.execution_metadata.worker == "w1"


async def test_metadata_timestamps_and_resource_usage(env: Env) -> None:
    outcome = await run(env, ["/bin/true"])
    metadata = outcome.result.execution_metadata
    names = [
        "queued_timestamp",
        "worker_start_timestamp",
        "input_fetch_start_timestamp",
        "input_fetch_completed_timestamp",
        "execution_start_timestamp",
        "execution_completed_timestamp",
        "output_upload_start_timestamp",
        "output_upload_completed_timestamp",
        "worker_completed_timestamp",
    ]
    stamps = [getattr(metadata, n).ToNanoseconds() for n in names]
    assert all(stamps) and stamps == sorted(stamps)
    (packed,) = metadata.auxiliary_metadata
    usage = lre_pb2.ResourceUsage()
    assert packed.Unpack(usage)
    assert usage.reserved_millicpus == 1000 and usage.attempt == 1


@pytest.mark.parametrize(
    "bad",
    ["", ".", "..", "a/b", "nul\x00"],
)
async def test_invalid_input_names(env: Env, bad: str) -> None:
    directory = re_pb2.Directory()
    directory.files.add(name=bad, digest=re_pb2.Digest(hash="0" * 64, size_bytes=0))
    root = await write_message(env.store, directory)
    outcome = await run(env, ["/bin/true"], input_root=root)
    assert isinstance(outcome.error, InvalidArgument)
    assert str(root) in outcome.error.message
    assert outcome.result.HasField("execution_metadata")


async def test_duplicate_and_unsorted_names(env: Env) -> None:
    empty = re_pb2.Digest(
        hash="e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", size_bytes=0
    )
    duplicate = re_pb2.Directory()
    duplicate.files.add(name="a", digest=empty)
    duplicate.directories.add(name="a", digest=empty)
    unsorted = re_pb2.Directory()
    unsorted.files.add(name="b", digest=empty)
    unsorted.files.add(name="a", digest=empty)
    for directory, words in ((duplicate, "more than once"), (unsorted, "not sorted")):
        root = await write_message(env.store, directory)
        outcome = await run(env, ["/bin/true"], input_root=root)
        assert isinstance(outcome.error, InvalidArgument)
        assert words in outcome.error.message and str(root) in outcome.error.message


async def test_input_symlinks(env: Env) -> None:
    ok = await run(
        env,
        ["/bin/cat", "d/link"],
        inputs={"d": {"link": Link("../f")}, "f": b"through"},
    )
    assert await blob(env.store, ok.result.stdout_digest) == b"through"
    for target in ("/etc/passwd", "../../outside"):
        bad = await run(env, ["/bin/true"], inputs={"d": {"link": Link(target)}})
        assert isinstance(bad.error, InvalidArgument) and target in bad.error.message


async def test_escaping_working_directory_and_outputs(env: Env) -> None:
    for kwargs in (
        {"working_directory": "../x"},
        {"output_paths": ("/abs",)},
        {"output_paths": ("a/../../b",)},
    ):
        outcome = await run(env, ["/bin/true"], **kwargs)
        assert isinstance(outcome.error, InvalidArgument)


async def test_missing_input_blob(env: Env) -> None:
    directory = re_pb2.Directory()
    directory.files.add(name="f", digest=re_pb2.Digest(hash="ab" * 32, size_bytes=3))
    root = await write_message(env.store, directory)
    outcome = await run(env, ["/bin/true"], input_root=root)
    assert isinstance(outcome.error, MissingBlobs)
    assert outcome.error.subjects == (f"blobs/{'ab' * 32}/3",)


async def test_inputs_are_read_only_and_executable_bits_kept(env: Env) -> None:
    outcome = await run(
        env,
        ["/bin/sh", "-c", "./tool; stat -c '%a' tool data; echo more >> data || echo refused"],
        inputs={"tool": File(b"#!/bin/sh\necho tool ran\n", executable=True), "data": b"d"},
    )
    out = (await blob(env.store, outcome.result.stdout_digest)).decode().split("\n")
    assert out[0] == "tool ran"
    assert out[1:3] == ["555", "444"]


async def test_unknown_program_is_invalid_argument(env: Env) -> None:
    outcome = await run(env, ["/no/such/program"])
    assert isinstance(outcome.error, InvalidArgument)
    assert "/no/such/program" in outcome.error.message


async def test_empty_input_root_needs_no_blob(tmp_path: Path) -> None:
    store = MemoryStore(1 << 20)  # holds no Directory at all
    spec = make_spec(tmp_path)
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store))
        lease = await make_lease(
            store,
            ["/bin/sh", "-c", "mkdir -p a/b && echo hi > a/b/c && ls -A"],
            input_root=Digest.from_proto(re_pb2.Digest(hash=EMPTY_DIGEST.hash, size_bytes=0)),
            output_paths=("a/b/c", "x/y/z"),
        )
        outcome = await runner.run(lease)
    assert isinstance(outcome, Completed) and outcome.error is None
    assert outcome.result.exit_code == 0
    # the parents of every output path exist before the action starts
    assert await blob(store, outcome.result.stdout_digest) == b"a\nx\n"
    assert [f.path for f in outcome.result.output_files] == ["a/b/c"]


async def test_large_stdout_is_hashed_whole(env: Env) -> None:
    size = 300_000  # above the inline-hashing limit, hashed in a thread
    outcome = await run(env, ["/bin/sh", "-c", f"head -c {size} /dev/zero; echo err >&2"])
    assert outcome.result.stdout_digest.size_bytes == size
    assert await blob(env.store, outcome.result.stdout_digest) == b"\0" * size
    assert await blob(env.store, outcome.result.stderr_digest) == b"err\n"


MAKEFLAGS_PROBE = 'printf "%s|%s" "$MAKEFLAGS" "$MFLAGS"'


async def test_one_cpu_actions_share_one_empty_pool(env: Env) -> None:
    first = await run(env, ["/bin/sh", "-c", MAKEFLAGS_PROBE], env={"MAKEFLAGS": "-j64"})
    second = await run(env, ["/bin/sh", "-c", MAKEFLAGS_PROBE], millicpus=1500)
    flags = [
        (await blob(env.store, outcome.result.stdout_digest)).decode()
        for outcome in (first, second)
    ]
    assert flags[0] == flags[1]
    assert flags[0].startswith("-j --jobserver-fds=") and flags[0].endswith("|")
    assert env.runner.jobserver_tokens() == (0, 0)
    env.runner.close()


async def test_shared_empty_pool_drains_tokens_a_client_made_up(env: Env) -> None:
    script = 'fds=${MAKEFLAGS#*fds=}; w=${fds%% *}; w=${w#*,}; printf ++ >&"$w"'
    outcome = await run(env, ["/bin/bash", "-c", script])
    assert outcome.result.exit_code == 0
    pool = env.runner.parts.jobservers._empty_pool
    assert pool is not None and pool.free_tokens() == 0  # drained after the action
    env.runner.close()


async def test_private_pool_counted_while_running(env: Env) -> None:
    lease = await make_lease(env.store, ["/bin/sh", "-c", "sleep 30"], millicpus=3000, timeout_s=60)
    seen: list[tuple[int, int]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(env.runner.run, lease)
        with trio.fail_after(10):
            while env.runner.jobserver_tokens() == (0, 0):  # noqa: ASYNC110
                await trio.sleep(0.01)
        seen.append(env.runner.jobserver_tokens())
        nursery.cancel_scope.cancel()
    assert seen == [(0, 2)]  # two free tokens, none held
    assert env.runner.jobserver_tokens() == (0, 0)


#: From inside an action: find the fifo MAKEFLAGS names, take a token from it
#: and give it back (what a make >= 4.4 or ninja client does).
FIFO_CLIENT = (
    "f=${MAKEFLAGS#*--jobserver-auth=fifo:}; f=${f%% *}; "
    'test -p "$f" || { echo "not a fifo: $MAKEFLAGS"; exit 3; }; '
    'head -c1 "$f" > token && cat token > "$f" && printf "%s|%s|" "$f" "$(wc -c < token)"; '
    'case "$MAKEFLAGS" in *jobserver-fds*) echo "fds too: $MAKEFLAGS"; exit 4;; esac'
)


async def test_fifo_style_reaches_the_action_through_the_runner(
    tmp_path: Path, store: MemoryStore
) -> None:
    """``jobserver.style: fifo`` is what the action gets (not only what the
    pool can do on its own): its MAKEFLAGS name a fifo in its private
    temporary directory (reachable in its view) that serves tokens, and no
    descriptor pair; a one-CPU action gets a fifo too."""
    spec = make_spec(tmp_path, jobserver=JobserverSpec(style="fifo"))
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store))
        lease = await make_lease(store, ["/bin/sh", "-c", FIFO_CLIENT], millicpus=3000)
        outcome = await runner.run(lease)
        assert isinstance(outcome, Completed), outcome
        said = (await blob(store, outcome.result.stdout_digest)).decode()
        assert outcome.result.exit_code == 0, said
        fifo, taken, _ = said.split("|")
        assert taken.strip() == "1"
        assert Path(fifo).name == "jobserver.fifo"
        assert Path(fifo).parent.name == "tmp"  # the action's own, shown in its view
        assert Path(fifo).is_relative_to(workdir.path)
        assert runner.jobserver_tokens() == (0, 0)
        # a one-CPU action has no token to take (only its implicit one), but
        # its MAKEFLAGS still name a fifo it can open
        probe = 'f=${MAKEFLAGS#*--jobserver-auth=fifo:}; f=${f%% *}; test -p "$f" && echo "$f"'
        one_cpu = await make_lease(store, ["/bin/sh", "-c", probe], millicpus=1000)
        outcome = await runner.run(one_cpu)
        assert isinstance(outcome, Completed), outcome
        said = (await blob(store, outcome.result.stdout_digest)).decode()
        assert outcome.result.exit_code == 0, said
        assert Path(said.strip()).parent.name == "tmp"
        runner.close()


async def test_jobserver_disabled_keeps_commands_makeflags(
    tmp_path: Path, store: MemoryStore
) -> None:
    from lre.config._worker_models import JobserverSpec

    spec = make_spec(tmp_path, jobserver=JobserverSpec(enabled=False))
    with WorkDirectory.open(spec.work_directory, spec.name) as workdir:
        runner = ActionRunner(RunnerContext(spec, workdir, store))
        lease = await make_lease(
            store,
            ["/bin/sh", "-c", MAKEFLAGS_PROBE],
            env={"MAKEFLAGS": "-j4", "MFLAGS": "-j4"},
            millicpus=4000,
        )
        outcome = await runner.run(lease)
    assert isinstance(outcome, Completed)
    assert await blob(store, outcome.result.stdout_digest) == b"-j4|-j4"


async def test_recycled_directories_show_each_action_exactly_its_tree(env: Env) -> None:
    """With the janitor running, action directories are recycled with the
    previous action's directories kept; each action must still see only its
    own inputs and output parents."""
    listing = ["/bin/sh", "-c", "find . | LC_ALL=C sort"]
    async with trio.open_nursery() as nursery:
        directories = env.runner.parts.directories
        await nursery.start(directories.run)
        with trio.fail_after(10):
            while directories.ready < directories.stock_size:  # noqa: ASYNC110 (thread work)
                await trio.sleep(0.01)
        first = await run(
            env,
            [*listing[:2], listing[2] + "; mkdir -p made/by/action; echo o > out/obj/a.o"],
            inputs={
                "src": {"a.c": b"a", "lib": {"a.h": b"h"}},
                "tools": {"cc": File(b"#", executable=True)},
            },
            output_paths=("out/obj/a.o",),
        )
        assert await blob(env.store, first.result.stdout_digest) == (
            b".\n./out\n./out/obj\n./src\n./src/a.c\n./src/lib\n./src/lib/a.h\n"
            b"./tools\n./tools/cc\n"
        )
        with trio.fail_after(10):
            # ``recycled`` counts in the batch's thread, before the batch hands
            # the directory back to the stock: wait for the janitor to be idle
            while directories.recycled < 1 or not directories.idle:  # noqa: ASYNC110
                await trio.sleep(0.01)
        # the directory the next action gets still holds the first one's
        # directories (in a view, those the action made are in its upper layer)
        kept = {"src", "src/lib", "out/obj"}
        if env.runner.parts.view_policy is None:
            kept.add("made/by")
        assert directories._stock[-1].existing >= kept
        second = await run(
            env,
            listing,
            inputs={"src": {"b.c": b"b"}, "tools": b"now a file"},
            output_paths=("out/bin/b",),
        )
        assert await blob(env.store, second.result.stdout_digest) == (
            b".\n./out\n./out/bin\n./src\n./src/b.c\n./tools\n"
        )
        nursery.cancel_scope.cancel()
