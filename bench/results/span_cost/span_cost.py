"""Cost of one call's span bookkeeping (InvocationSpans.opened + closed) with
Bazel-like metadata, A/B/A/B against the same loop without it."""

import statistics
import time
import uuid

from lre.proto import REQUEST_METADATA_KEY, re_pb2
from lre.service import InvocationSpans

info = re_pb2.RequestMetadata(
    tool_details=re_pb2.ToolDetails(tool_name="bazel", tool_version="4.2.3"),
    tool_invocation_id=str(uuid.uuid4()),
    correlated_invocations_id=str(uuid.uuid4()),
    action_id="a" * 64,
    action_mnemonic="CppCompile",
    target_id="//src/core:parser",
    configuration_id="b" * 64,
)
metadata = [
    ("user-agent", "grpc-java-netty/1.33.1"),
    (REQUEST_METADATA_KEY, info.SerializeToString()),
    ("x-lre-repository", "app-0badcafe"),
]
N = 50_000


def with_spans() -> float:
    spans = InvocationSpans()
    start = time.perf_counter()
    for _ in range(N):
        span = spans.opened(metadata)
        if span is not None:
            spans.closed(span)
    return (time.perf_counter() - start) / N


def without() -> float:
    start = time.perf_counter()
    for _ in range(N):
        span = None
        if span is not None:
            pass
    return (time.perf_counter() - start) / N


a, b = [], []
for _ in range(5):
    a.append(with_spans())
    b.append(without())
    a.append(with_spans())
    b.append(without())
print("with spans, us per call:", [round(x * 1e6, 2) for x in a])
print("without,    us per call:", [round(x * 1e6, 2) for x in b])
print(
    "median with",
    round(statistics.median(a) * 1e6, 2),
    "us; without",
    round(statistics.median(b) * 1e6, 3),
    "us; A/A spread (with):",
    round((max(a) - min(a)) / statistics.median(a) * 100, 1),
    "%",
)
