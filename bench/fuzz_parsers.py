"""Fuzz the request parsers with hypothesis and record how many inputs ran.

Targets: ByteStream resource names (read and write), digest lists
(FindMissingBlobs' fast path against the strict parser), Directory
validation, and the config loader (random JSON5-ish text and mutated valid
configs). The property: a parser returns a valid value or raises its own
error type (``InvalidArgument`` / ``ConfigError``) - never anything else.

    .venv/bin/python bench/fuzz_parsers.py [--examples 20000]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lre.cas.trees._tree import validate_directory
from lre.config import ConfigError
from lre.config._loader import load_config_text
from lre.digest import MAX_BLOB_SIZE, Digest
from lre.errors import InvalidArgument
from lre.proto import re_pb2
from lre.service._cas_ops import parse_digests
from lre.service._resource_names import parse_read_resource, parse_write_resource
from tests.config.conftest import MINIMAL

HEX = "0123456789abcdef"
COUNTS: dict[str, int] = {}


def counted(name: str, fn: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(fn)
    def run(*args: object, **kwargs: object) -> None:
        COUNTS[name] = COUNTS.get(name, 0) + 1
        fn(*args, **kwargs)

    return run


def check_name(parse: Callable[[str], object], name: str) -> None:
    try:
        resource = parse(name)
    except InvalidArgument as error:
        assert error.message.startswith("resource_name "), error.message
        return
    digest = resource.digest  # type: ignore[attr-defined]
    assert len(digest.hash) == 64 and set(digest.hash) <= set(HEX)
    assert 0 <= digest.size_bytes <= MAX_BLOB_SIZE


names = st.text(max_size=300) | st.lists(
    st.sampled_from(["blobs", "uploads", "compressed-blobs", "zstd", "sha256", "md5", "", "x",
                     "a" * 64, "0", "-1", "12", "deflate", "Ab" * 32]),
    max_size=9,
).map("/".join)  # fmt: skip


def fuzz_names(read: str) -> None:
    check_name(parse_read_resource, read)
    check_name(parse_write_resource, read)


def fuzz_digests(pairs: list[tuple[str, int]]) -> None:
    protos = [re_pb2.Digest(hash=h, size_bytes=s) for h, s in pairs]
    try:
        strict: list[Digest] | None = [Digest.parse(h, s) for h, s in pairs]
    except InvalidArgument:
        strict = None
    try:
        fast = parse_digests(protos, "d")
    except InvalidArgument:
        assert strict is None, pairs
        return
    assert fast == strict, pairs


def fuzz_directory(data: bytes) -> None:
    directory = re_pb2.Directory()
    try:
        directory.ParseFromString(data)
    except Exception:
        return
    try:
        validate_directory(directory, "fuzz")
    except InvalidArgument:
        return


def fuzz_config(text: str) -> None:
    try:
        load_config_text(text, source="fuzz.json5", env={"HOME": "/home/fuzz"})
    except ConfigError:
        return


def mutate(base: str) -> st.SearchStrategy[str]:
    return st.tuples(st.integers(0, len(base)), st.integers(0, 20), st.text(max_size=20)).map(
        lambda t: base[: t[0]] + t[2] + base[t[0] + t[1] :]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20_000, help="per target")
    args = parser.parse_args()
    config = settings(
        max_examples=args.examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    hashes = st.text(HEX, min_size=64, max_size=64) | st.text(HEX + "\nA/", max_size=140)
    targets = [
        ("resource names", given(names)(counted("resource names", fuzz_names))),
        (
            "digest lists",
            given(
                st.lists(
                    st.tuples(hashes, st.integers(-(1 << 63), (1 << 63) - 1)),
                    min_size=1,
                    max_size=8,
                )
            )(counted("digest lists", fuzz_digests)),
        ),
        ("Directory", given(st.binary(max_size=400))(counted("Directory", fuzz_directory))),
        (
            "config loader",
            given(st.text(max_size=400) | mutate(MINIMAL))(counted("config loader", fuzz_config)),
        ),
    ]
    failed = False
    for name, test in targets:
        started = time.perf_counter()
        try:
            config(test)()
            outcome = "ok"
        except Exception as error:  # a property failed: report and go on
            outcome = f"FAILED: {type(error).__name__}: {str(error)[:300]}"
            failed = True
        elapsed = time.perf_counter() - started
        runs = COUNTS.get(name, 0)
        print(
            f"{name:16s} {runs:7d} inputs in {elapsed:6.1f} s ({runs / elapsed:8.0f}/s): {outcome}"
        )
    print(f"total inputs: {sum(COUNTS.values())}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
