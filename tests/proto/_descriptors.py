"""Flatten protobuf file descriptors into plain JSON data and compare two of them.

Used by the conformance tests in two processes: run as a script, it imports the
reference generated code (buildgrid-common) in its own interpreter and prints
the flattened descriptors as JSON on stdout; imported, it flattens lre's own
descriptors and compares. The reference must stay out of the test process:
buildgrid-common registers its own ``google/api/http.proto`` in the default
descriptor pool, which collides with googleapis-common-protos.

The flattened form maps each message and enum full name (``pkg.Outer.Inner``)
to a dict; only wire-relevant facts are kept (numbers, types, labels, type
names, enum values, reserved numbers and names), not comments or options.
"""

from __future__ import annotations

import base64
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pb2

Flat = dict[str, dict[str, Any]]

#: Reference modules, by the .proto file they were generated from.
REFERENCE_MODULES = {
    "build/bazel/remote/execution/v2/remote_execution.proto": (
        "buildgrid.common.protos.build.bazel.remote.execution.v2.remote_execution_pb2"
    ),
    "build/bazel/semver/semver.proto": "buildgrid.common.protos.build.bazel.semver.semver_pb2",
    "google/bytestream/bytestream.proto": (
        "buildgrid.common.protos.google.bytestream.bytestream_pb2"
    ),
}


def _ranges(ranges: Any) -> list[list[int]]:
    """Reserved ranges as [start, end) pairs (protobuf stores the end exclusive)."""
    return [[r.start, r.end] for r in ranges]


def _flatten_enum(prefix: str, enum: descriptor_pb2.EnumDescriptorProto, out: Flat) -> None:
    out[f"{prefix}{enum.name}"] = {
        "kind": "enum",
        "values": {v.name: v.number for v in enum.value},
        "reserved_ranges": [[r.start, r.end + 1] for r in enum.reserved_range],
        "reserved_names": sorted(enum.reserved_name),
    }


def _flatten_message(prefix: str, msg: descriptor_pb2.DescriptorProto, out: Flat) -> None:
    full = f"{prefix}{msg.name}"
    out[full] = {
        "kind": "message",
        "fields": {
            f.name: {
                "number": f.number,
                "type": descriptor_pb2.FieldDescriptorProto.Type.Name(f.type),
                "label": descriptor_pb2.FieldDescriptorProto.Label.Name(f.label),
                "type_name": f.type_name,
                "oneof": msg.oneof_decl[f.oneof_index].name
                if f.HasField("oneof_index") and not f.proto3_optional
                else None,
            }
            for f in msg.field
        },
        "nested": sorted(
            [f"{full}.{n.name}" for n in msg.nested_type]
            + [f"{full}.{e.name}" for e in msg.enum_type]
        ),
        "reserved_ranges": _ranges(msg.reserved_range),
        "reserved_names": sorted(msg.reserved_name),
    }
    for nested in msg.nested_type:
        _flatten_message(f"{full}.", nested, out)
    for enum in msg.enum_type:
        _flatten_enum(f"{full}.", enum, out)


def flatten(files: list[descriptor_pb2.FileDescriptorProto]) -> Flat:
    """Every message and enum (nested ones too) of ``files``, by full name."""
    out: Flat = {}
    for fd in files:
        prefix = f"{fd.package}." if fd.package else ""
        for msg in fd.message_type:
            _flatten_message(prefix, msg, out)
        for enum in fd.enum_type:
            _flatten_enum(prefix, enum, out)
        for service in fd.service:
            out[f"{prefix}{service.name}"] = {
                "kind": "service",
                "methods": {
                    m.name: {
                        "input": m.input_type,
                        "output": m.output_type,
                        "client_streaming": m.client_streaming,
                        "server_streaming": m.server_streaming,
                    }
                    for m in service.method
                },
            }
    return out


def parse_file(serialized: bytes) -> descriptor_pb2.FileDescriptorProto:
    """A FileDescriptorProto from bytes, without touching any descriptor pool."""
    return descriptor_pb2.FileDescriptorProto.FromString(serialized)


@dataclass
class Comparison:
    """Outcome of comparing our flattened descriptors with a reference's."""

    #: Disagreements on something both sides define: these make the test fail.
    mismatches: list[str] = field(default_factory=list)
    #: Fields, values, methods or types that only we define ("name" or "Msg.field").
    only_ours: list[str] = field(default_factory=list)
    #: Fields, values, methods or types that only the reference defines.
    only_reference: list[str] = field(default_factory=list)
    #: "Msg.old -> new": same number, type and label under another name (wire-compatible).
    renamed: list[str] = field(default_factory=list)


def _in_ranges(number: int, ranges: list[list[int]]) -> bool:
    return any(start <= number < end for start, end in ranges)


def _compare_message(name: str, ours: dict[str, Any], ref: dict[str, Any], res: Comparison) -> None:
    for fname in sorted(set(ours["fields"]) | set(ref["fields"])):
        mine, theirs = ours["fields"].get(fname), ref["fields"].get(fname)
        if mine is None:
            same_number = [
                (n, f) for n, f in ours["fields"].items() if f["number"] == theirs["number"]
            ]
            if not same_number:
                res.only_reference.append(f"{name}.{fname}")
            elif all(same_number[0][1][k] == theirs[k] for k in ("type", "label", "type_name")):
                res.renamed.append(f"{name}.{fname} -> {same_number[0][0]}")
            else:
                res.mismatches.append(
                    f"{name}.{fname}: number {theirs['number']} is {same_number[0][0]} here, "
                    "with a different type or label"
                )
            continue
        if theirs is None:
            if any(f["number"] == mine["number"] for f in ref["fields"].values()):
                continue  # a rename, reported from the reference's side
            res.only_ours.append(f"{name}.{fname}")
            if _in_ranges(mine["number"], ref["reserved_ranges"]):
                res.mismatches.append(
                    f"{name}.{fname}: number {mine['number']} is reserved in the reference"
                )
            if fname in ref["reserved_names"]:
                res.mismatches.append(f"{name}.{fname}: name is reserved in the reference")
            continue
        for key in ("number", "type", "label", "type_name", "oneof"):
            if mine[key] != theirs[key]:
                res.mismatches.append(
                    f"{name}.{fname}: {key} is {mine[key]!r}, reference has {theirs[key]!r}"
                )
    for start, end in ref["reserved_ranges"]:
        for number in range(start, min(end, start + 1000)):
            if not _in_ranges(number, ours["reserved_ranges"]) and not any(
                f["number"] == number for f in ours["fields"].values()
            ):
                res.mismatches.append(f"{name}: reference reserves {number}, we do not")


def _compare_enum(name: str, ours: dict[str, Any], ref: dict[str, Any], res: Comparison) -> None:
    for vname in sorted(set(ours["values"]) | set(ref["values"])):
        mine, theirs = ours["values"].get(vname), ref["values"].get(vname)
        if mine is None:
            res.only_reference.append(f"{name}.{vname}")
        elif theirs is None:
            res.only_ours.append(f"{name}.{vname}")
            if _in_ranges(mine, ref["reserved_ranges"]):
                res.mismatches.append(f"{name}.{vname}: value {mine} is reserved in the reference")
        elif mine != theirs:
            res.mismatches.append(f"{name}.{vname}: value is {mine}, reference has {theirs}")


def _compare_service(name: str, ours: dict[str, Any], ref: dict[str, Any], res: Comparison) -> None:
    for mname in sorted(set(ours["methods"]) | set(ref["methods"])):
        mine, theirs = ours["methods"].get(mname), ref["methods"].get(mname)
        if mine is None:
            res.only_reference.append(f"{name}.{mname}")
        elif theirs is None:
            res.only_ours.append(f"{name}.{mname}")
        elif mine != theirs:
            res.mismatches.append(f"{name}.{mname}: {mine} differs from reference {theirs}")


def compare(ours: Flat, reference: Flat) -> Comparison:
    """Compare every full name both sides define; list what only one side has."""
    res = Comparison()
    for name in sorted(set(ours) | set(reference)):
        mine, ref = ours.get(name), reference.get(name)
        if mine is None:
            res.only_reference.append(name)
        elif ref is None:
            res.only_ours.append(name)
        elif mine["kind"] != ref["kind"]:
            res.mismatches.append(f"{name}: a {mine['kind']} here, a {ref['kind']} in reference")
        elif mine["kind"] == "message":
            _compare_message(name, mine, ref, res)
        elif mine["kind"] == "enum":
            _compare_enum(name, mine, ref, res)
        else:
            _compare_service(name, mine, ref, res)
    return res


def _dump_reference() -> None:
    """Script mode: print the reference's serialized files and flattened form."""
    import importlib

    files = []
    serialized = {}
    for proto, module_name in REFERENCE_MODULES.items():
        module = importlib.import_module(module_name)
        fd = parse_file(module.DESCRIPTOR.serialized_pb)
        assert fd.name == proto, (fd.name, proto)
        files.append(fd)
        serialized[proto] = base64.b64encode(module.DESCRIPTOR.serialized_pb).decode()
    json.dump({"flat": flatten(files), "files": serialized}, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    _dump_reference()
