"""Generate a self-contained C workspace for Bazel 4.2.3 (Debian's bazel-bootstrap), offline.

The workspace has ``modules`` ``cc_library`` targets (one C file each) and one
``cc_binary`` ``//:app`` that calls them all and prints ``checksum XXXXXXXX``.
The same arithmetic is mirrored in Python (``Workspace.expected_checksum``), so a
test knows the right answer without trusting any build.

Offline quirks handled here (see ../shared/tools/peer/README.md for the facts):
- Bazel's built-in WORKSPACE suffix fetches ``rules_cc`` and ``rules_java`` from
  the network, and even a C-only build loads both; Debian's ``bazel-rules-cc``
  needs Bazel >= 5. So the workspace carries two small local repositories whose
  ``defs.bzl`` hand every rule to its ``native`` counterpart.
- Debian's ``/etc/bazel/bazelrc`` turns on ``--sandbox_debug``, which floods the
  log; the workspace ``.bazelrc`` turns it off.

Generation is deterministic for a given (modules, funcs, seed).
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path

MASK = 0xFFFFFFFF

#: lre's Bazel platforms; copied into a workspace as //toolchains/bazel.
TOOLCHAINS_BAZEL = Path(__file__).resolve().parents[2] / "toolchains" / "bazel"

#: Rules that Bazel 4.2.3's own files load from @rules_cc//cc:defs.bzl.
_CC_RULES = (
    "cc_binary",
    "cc_import",
    "cc_library",
    "cc_proto_library",
    "cc_test",
    "cc_toolchain",
    "cc_toolchain_suite",
    "fdo_prefetch_hints",
    "fdo_profile",
    "objc_import",
    "objc_library",
)
#: Rules that the registered JDK toolchains load from @rules_java//java:defs.bzl.
_JAVA_RULES = (
    "java_binary",
    "java_import",
    "java_library",
    "java_lite_proto_library",
    "java_package_configuration",
    "java_plugin",
    "java_proto_library",
    "java_runtime",
    "java_test",
    "java_toolchain",
)


@dataclass(frozen=True)
class _Func:
    """One generated C function: a loop of xorshift steps and a keyed switch."""

    shifts: tuple[int, int, int]
    mul: int
    add: int
    cases: tuple[tuple[int, int], ...]  # (rotate, xor key) per case

    def c_source(self, name: str) -> str:
        a, b, c = self.shifts
        cases = "\n".join(
            f"      case {i}u: x = ((x << {r}) | (x >> {32 - r})) ^ {k}u; break;"
            for i, (r, k) in enumerate(self.cases)
        )
        return (
            f"static uint32_t {name}(uint32_t x, uint32_t n)\n"
            "{\n"
            "  for (uint32_t i = 0; i < n; i++) {\n"
            f"    x ^= x << {a}; x ^= x >> {b}; x ^= x << {c};\n"
            f"    x += i * {self.mul}u + {self.add}u;\n"
            f"    switch (x % {len(self.cases)}u) {{\n"
            f"{cases}\n"
            "      default: break;\n"
            "    }\n"
            "  }\n"
            "  return x;\n"
            "}\n"
        )

    def evaluate(self, x: int, n: int) -> int:
        a, b, c = self.shifts
        for i in range(n):
            x ^= (x << a) & MASK
            x ^= x >> b
            x ^= (x << c) & MASK
            x = (x + i * self.mul + self.add) & MASK
            r, k = self.cases[x % len(self.cases)]
            x = (((x << r) & MASK) | (x >> (32 - r))) ^ k
        return x


@dataclass(frozen=True)
class _Module:
    index: int
    funcs: tuple[_Func, ...]

    @property
    def name(self) -> str:
        return f"mod_{self.index:02d}"

    def c_source(self) -> str:
        parts = [f'#include <stdint.h>\n#include "src/{self.name}.h"\n']
        for j, func in enumerate(self.funcs):
            parts.append(func.c_source(f"{self.name}_f{j}"))
        calls = "\n".join(
            f"  h = (h * 31u) ^ {self.name}_f{j}(h + {j}u, n);" for j in range(len(self.funcs))
        )
        parts.append(
            f"uint32_t {self.name}_run(uint32_t seed, uint32_t n)\n"
            f"{{\n  uint32_t h = seed ^ {self.index}u;\n{calls}\n  return h;\n}}\n"
        )
        return "\n".join(parts)

    def c_header(self) -> str:
        guard = self.name.upper() + "_H"
        return (
            f"#ifndef {guard}\n#define {guard}\n#include <stdint.h>\n"
            f"uint32_t {self.name}_run(uint32_t seed, uint32_t n);\n#endif\n"
        )

    def evaluate(self, seed: int, n: int) -> int:
        h = seed ^ self.index
        for j, func in enumerate(self.funcs):
            h = ((h * 31) & MASK) ^ func.evaluate((h + j) & MASK, n)
        return h


@dataclass(frozen=True)
class Workspace:
    """A generated workspace on disk and the model of what its binary prints."""

    root: Path
    modules: tuple[_Module, ...]

    #: The binary target; ``bazel-bin/app`` after a build.
    target = "//:app"

    def expected_checksum(self, n: int) -> str:
        """What ``app N`` prints, computed in Python."""
        h = 2166136261
        for module in self.modules:
            h = ((h ^ module.evaluate(h, n)) * 16777619) & MASK
        return f"checksum {h:08x}"

    @property
    def binary(self) -> Path:
        return self.root / "bazel-bin" / "app"

    @property
    def spawn_count(self) -> int:
        """Spawns of a clean build of //:app: one compile per module, the main
        compile and the link (libraries' .a/.so are built only for //...)."""
        return len(self.modules) + 2


def _random_module(rnd: random.Random, index: int, funcs: int) -> _Module:
    return _Module(
        index=index,
        funcs=tuple(
            _Func(
                shifts=(rnd.randint(1, 15), rnd.randint(1, 15), rnd.randint(1, 15)),
                mul=rnd.randint(1, MASK),
                add=rnd.randint(1, MASK),
                cases=tuple(
                    (rnd.randint(1, 31), rnd.randint(0, MASK)) for _ in range(rnd.randint(6, 12))
                ),
            )
            for _ in range(funcs)
        ),
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _stub_repository(root: Path, name: str, package: str, rules: tuple[str, ...]) -> None:
    base = root / "third_party" / name
    _write(base / "WORKSPACE", f'workspace(name = "{name}")\n')
    _write(base / "BUILD", "")
    build = 'package(default_visibility = ["//visibility:public"])\n\nexports_files(["defs.bzl"])\n'
    if name == "rules_cc":
        build += (
            '\nalias(name = "toolchain_type", actual = "@bazel_tools//tools/cpp:toolchain_type")\n'
        )
    _write(base / package / "BUILD", build)
    defs = [f'"""Offline stand-in for @{name}: each rule is the native one."""\n']
    defs += [f"def {rule}(**kwargs):\n    native.{rule}(**kwargs)\n" for rule in rules]
    _write(base / package / "defs.bzl", "\n".join(defs))


#: ``BUILD`` of the offline stand-in for ``@remote_coverage_tools``, which
#: ``bazel test`` needs even without coverage (docs/troubleshooting.md quotes
#: it): the two targets ``@bazel_tools//tools/test`` names, empty.
COVERAGE_TOOLS_BUILD = (
    'filegroup(name = "coverage_report_generator", visibility = ["//visibility:public"])\n'
    'filegroup(name = "lcov_merger", visibility = ["//visibility:public"])\n'
)


def write_offline_scaffold(root: Path, name: str) -> None:
    """Make ``root`` (created if needed) a Bazel 4.2.3 workspace called ``name``
    that builds and tests C offline: ``WORKSPACE`` with the three stub repositories under
    ``third_party/`` (kept out of ``//...`` by ``.bazelignore``) and a
    ``.bazelrc`` with quiet output. Overwrites those files; BUILD files are
    the caller's.
    """
    root.mkdir(parents=True, exist_ok=True)
    _stub_repository(root, "rules_cc", "cc", _CC_RULES)
    _stub_repository(root, "rules_java", "java", _JAVA_RULES)
    coverage = root / "third_party" / "remote_coverage_tools"
    _write(coverage / "WORKSPACE", 'workspace(name = "remote_coverage_tools")\n')
    _write(coverage / "BUILD", COVERAGE_TOOLS_BUILD)
    _write(root / ".bazelignore", "third_party\n")
    _write(
        root / "WORKSPACE",
        f'workspace(name = "{name}")\n\n'
        "# Local stand-ins: Bazel would download these, and nothing can be downloaded here.\n"
        'local_repository(name = "rules_cc", path = "third_party/rules_cc")\n'
        'local_repository(name = "rules_java", path = "third_party/rules_java")\n'
        "# bazel test needs it even without --coverage.\n"
        'local_repository(name = "remote_coverage_tools", path = '
        '"third_party/remote_coverage_tools")\n',
    )
    _write(
        root / ".bazelrc",
        "build --color=no --curses=no --show_progress_rate_limit=5\n"
        "# Debian's /etc/bazel/bazelrc turns on --sandbox_debug; it is far too noisy.\n"
        "build --nosandbox_debug\n",
    )


def generate_workspace(
    root: Path,
    *,
    modules: int = 24,
    funcs: int = 3,
    seed: int = 20260,
    first_module_exec_properties: dict[str, str] | None = None,
) -> Workspace:
    """Write the workspace into ``root`` (created if needed) and return its model.

    The workspace also gets lre's platforms as ``//toolchains/bazel`` (for
    ``--extra_execution_platforms=//toolchains/bazel:lre``), and
    ``first_module_exec_properties`` as per-target ``exec_properties`` of
    ``mod_00`` (how a user marks a heavy target).
    """
    if modules < 1 or funcs < 1:
        raise ValueError(f"modules={modules}, funcs={funcs}: both must be at least 1")
    rnd = random.Random(seed)
    mods = tuple(_random_module(rnd, i, funcs) for i in range(modules))
    write_offline_scaffold(root, "lre_e2e")
    shutil.copytree(TOOLCHAINS_BAZEL, root / "toolchains" / "bazel", dirs_exist_ok=True)
    build = ['COPTS = ["-O2"]\n']
    for mod in mods:
        _write(root / "src" / f"{mod.name}.c", mod.c_source())
        _write(root / "src" / f"{mod.name}.h", mod.c_header())
        extra = ""
        if mod.index == 0 and first_module_exec_properties:
            items = ", ".join(f'"{k}": "{v}"' for k, v in first_module_exec_properties.items())
            extra = f"    exec_properties = {{{items}}},\n"
        build.append(
            f'cc_library(\n    name = "{mod.name}",\n    srcs = ["src/{mod.name}.c"],\n'
            f'    hdrs = ["src/{mod.name}.h"],\n    copts = COPTS,\n{extra})\n'
        )
    deps = "".join(f'        ":{mod.name}",\n' for mod in mods)
    build.append(
        'cc_binary(\n    name = "app",\n    srcs = ["src/main.c"],\n    copts = COPTS,\n'
        f"    deps = [\n{deps}    ],\n)\n"
    )
    _write(root / "BUILD", "\n".join(build))
    includes = "".join(f'#include "src/{mod.name}.h"\n' for mod in mods)
    calls = "".join(f"  h = (h ^ {mod.name}_run(h, n)) * 16777619u;\n" for mod in mods)
    _write(
        root / "src" / "main.c",
        "#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
        f"{includes}\n"
        "int main(int argc, char **argv)\n{\n"
        "  uint32_t n = argc > 1 ? (uint32_t)strtoul(argv[1], 0, 10) : 1000u;\n"
        "  uint32_t h = 2166136261u;\n"
        f"{calls}"
        '  printf("checksum %08x\\n", h);\n  return 0;\n}\n',
    )
    return Workspace(root=root, modules=mods)
