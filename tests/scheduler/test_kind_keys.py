"""Kind keys that keep repositories and the actions of one target apart,
and the learner's fallbacks from a new key to older history."""

from __future__ import annotations

from lre.proto import re_pb2
from lre.scheduler import RequestInfo
from lre.scheduler._kind import kind_key
from lre.scheduler._kind_rule import KindKey, repository_label
from lre.scheduler._learner import ReservationLearner

MiB = 1 << 20
GCC = ["/usr/bin/gcc", "-O2", "-c", "src/a.c", "-o", "bazel-out/k8/bin/_objs/lib/a.o"]


def _compile(output: str) -> re_pb2.Command:
    return re_pb2.Command(arguments=GCC, output_files=[output, output[:-1] + "d"])


def _bazel(repository: str = "") -> RequestInfo:
    return RequestInfo(action_mnemonic="CppCompile", target_id="//:lib", repository=repository)


def test_two_repositories_with_the_same_labels_do_not_share() -> None:
    command = _compile("bazel-out/k8/bin/_objs/lib/a.o")
    one = kind_key(_bazel("first-1a2b3c4d"), command, "main")
    other = kind_key(_bazel("second-5e6f7a8b"), command, "main")
    assert one != other
    assert one.startswith("[first-1a2b3c4d] bazel:CppCompile://:lib -> ")
    # without the header, the instance name tells them apart
    assert kind_key(_bazel(), command, "first") != kind_key(_bazel(), command, "second")
    # commands without Bazel's metadata too
    shape = re_pb2.Command(arguments=GCC)
    assert kind_key(RequestInfo(repository="a"), shape) != kind_key(
        RequestInfo(repository="b"), shape
    )


def test_two_compiles_of_one_target_do_not_share() -> None:
    a = kind_key(_bazel("r"), _compile("bazel-out/k8/bin/_objs/lib/a.o"))
    b = kind_key(_bazel("r"), _compile("bazel-out/k8/bin/_objs/lib/b.o"))
    assert a != b
    # but they share the target's key, which each falls back to
    assert a.fallbacks[0] == b.fallbacks[0] == "[r] bazel:CppCompile://:lib"


def test_two_commands_of_one_shape_without_a_target_do_not_share() -> None:
    """Buck2 sends no target: two compiles of one shape keep two histories,
    both also recorded under the shape, which a new output starts from."""
    a = kind_key(RequestInfo(repository="r"), _compile("buck-out/v2/gen/root/x/__lib__/a.o"))
    b = kind_key(RequestInfo(repository="r"), _compile("buck-out/v2/gen/root/x/__lib__/b.o"))
    assert a != b
    assert a.startswith("[r] cmd:gcc:") and a.endswith(" -> buck-out/v2/gen/root/x/__lib__/a.d")
    assert a.fallbacks[0] == b.fallbacks[0] == a.shared[0]
    assert a.fallbacks[0].startswith("[r] cmd:gcc:") and " -> " not in a.fallbacks[0]
    learner = ReservationLearner(":memory:", cold_memory_bytes=512 * MiB)
    learner.record(a, 100 * MiB, 0, 0)
    learned_b = learner.estimate(b, 1000, 0)
    assert learned_b.source == "learned"  # from the shape's key, not cold
    assert learned_b.memory_bytes == 120 * MiB


def test_a_rebuild_keeps_its_key() -> None:
    """New inputs, new arguments' values, outputs listed in another order:
    the same action of the same target, so the same key."""
    first = kind_key(_bazel("r"), _compile("bazel-out/k8/bin/_objs/lib/a.o"))
    edited = re_pb2.Command(
        arguments=[*GCC[:4], "-DEDIT=2", *GCC[4:]],
        output_files=["bazel-out/k8/bin/_objs/lib/a.d", "bazel-out/k8/bin/_objs/lib/a.o"],
    )
    assert kind_key(_bazel("r"), edited) == first
    # REAPI 2.1 output_paths count as the outputs
    paths = re_pb2.Command(arguments=GCC, output_paths=["bazel-out/k8/bin/_objs/lib/a.d"])
    assert kind_key(_bazel("r"), paths) == first


def test_repository_label_is_printable_and_bounded() -> None:
    assert repository_label(" proj-1a2b ", "main") == "proj-1a2b"
    assert repository_label("", "main") == "main"
    assert repository_label("", "") == ""
    assert repository_label("a b/c\n" + "x" * 200, "") == ("a_b_c_" + "x" * 200)[:64]


def test_a_new_source_of_a_known_target_starts_from_its_siblings() -> None:
    learner = ReservationLearner(":memory:", cold_memory_bytes=512 * MiB)
    a = kind_key(_bazel("r"), _compile("bazel-out/k8/bin/_objs/lib/a.o"))
    b = kind_key(_bazel("r"), _compile("bazel-out/k8/bin/_objs/lib/b.o"))
    learner.record(a, 100 * MiB, 0, 0)
    learned_b = learner.estimate(b, 1000, 0)
    assert learned_b.source == "learned"  # from the target's key, not cold
    assert learned_b.memory_bytes == 120 * MiB
    learner.record(b, 300 * MiB, 0, 0)
    # each compile has its own history now: a stays at its own peak
    assert learner.estimate(a, 1000, 0).memory_bytes == 120 * MiB
    assert learner.estimate(b, 1000, 0).memory_bytes == 360 * MiB
    # and another repository's same labels learn nothing from these
    other = kind_key(_bazel("s"), _compile("bazel-out/k8/bin/_objs/lib/a.o"))
    assert learner.estimate(other, 1000, 0).source == "cold"


def test_history_under_the_old_key_stays_readable() -> None:
    """Samples recorded before repositories were told apart (key
    ``bazel:{mnemonic}:{target}``) are read when the new key has none; new
    runs are not written there."""
    learner = ReservationLearner(":memory:", cold_memory_bytes=512 * MiB)
    learner.record("bazel:CppCompile://:lib", 100 * MiB, 0, 0)
    key = kind_key(_bazel("r"), _compile("bazel-out/k8/bin/_objs/lib/a.o"))
    assert learner.estimate(key, 1000, 0).memory_bytes == 120 * MiB
    learner.record(key, 200 * MiB, 0, 0)
    assert learner.estimate(key, 1000, 0).memory_bytes == 240 * MiB
    assert learner.lookup("bazel:CppCompile://:lib") == (0, 120 * MiB, 0)


def test_a_plain_string_key_has_no_fallbacks() -> None:
    learner = ReservationLearner(":memory:", cold_memory_bytes=512 * MiB)
    learner.record("bazel:CppCompile://:lib", 50 * MiB, 0, 0)
    assert learner.estimate("[r] bazel:CppCompile://:lib", 1000, 0).source == "cold"
    key = KindKey("k", fallbacks=("k", "j"), shared=("j", "x"))
    assert (key.fallbacks, key.shared) == (("j",), ("j",))
