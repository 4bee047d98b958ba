"""flake.nix, checked offline: CI has no network for nixpkgs, so the flake is
parsed, then evaluated against a stand-in for nixpkgs (``STUB``) that offers
only attributes nixpkgs really has and records what the flake builds.

What the stand-in encodes about nixpkgs (the reasons the flake once failed):
``trio-util`` is not a Python package there, ``import-linter`` is a top-level
package and not a Python one, and the flake is evaluated for Linux systems
only. An attribute the flake uses that the stand-in lacks is an evaluation
error, so a new dependency needs its nixpkgs name added here deliberately.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Python packages of nixpkgs' python3.pkgs the flake may use.
PYTHON_PACKAGES = [
    "anyio",
    "async-generator",
    "googleapis-common-protos",
    "grpc-stubs",
    "grpcio",
    "grpcio-tools",
    "hypothesis",
    "json5",
    "mypy",
    "prometheus-client",
    "protobuf",
    "psutil",
    "pytest",
    "pytest-trio",
    "rich",
    "setuptools",
    "trio",
    "typer",
    "types-protobuf",
    "types-psutil",
    "wheel",
    "zstandard",
]
#: Top-level nixpkgs packages the flake may use.
TOP_LEVEL = ["bazel_7", "gcc", "gnumake", "import-linter", "ruff", "slirp4netns", "time", "tmux"]
LINUX = ["aarch64-linux", "x86_64-linux"]

STUB = """
let
  flake = import (ROOT + "/flake.nix");
  genAttrs = names: f: builtins.listToAttrs (map (n: { name = n; value = f n; }) names);
  lib = {
    inherit genAttrs;
    licenses = { mit = "mit"; asl20 = "asl20"; };
    platforms.linux = LINUX;
  };
  stub = name: { inherit name; outPath = "/nix/store/stub-" + name; };
  built = kind: args: stub args.pname // { inherit kind args; };
  py = genAttrs PYTHON stub // {
    buildPythonPackage = built "package";
    buildPythonApplication = built "application";
  };
  pkgs = genAttrs TOP stub // {
    inherit lib;
    python3 = { pkgs = py; withPackages = f: stub "python-env" // { packages = f py; }; };
    fetchPypi = args: stub "sdist" // { inherit (args) pname version hash; };
    mkShell = args: stub "shell" // { inherit (args) packages; };
    writeShellScript = name: text: "/nix/store/stub-" + name;
  };
  nixpkgs = {
    inherit lib;
    legacyPackages = genAttrs (LINUX ++ [ "x86_64-darwin" "aarch64-darwin" ]) (_: pkgs);
  };
  out = flake.outputs { self = out; inherit nixpkgs; };
  names = map (p: p.name);
  lre = out.packages.x86_64-linux.default;
  trioUtil = builtins.head (builtins.filter (p: p.name == "trio_util") lre.args.dependencies);
  shell = out.devShells.x86_64-linux.default;
in
{
  systems = {
    packages = builtins.attrNames out.packages;
    apps = builtins.attrNames out.apps;
    devShells = builtins.attrNames out.devShells;
  };
  outputs = builtins.attrNames out.packages.x86_64-linux ++ builtins.attrNames out;
  app = out.apps.x86_64-linux.default.program;
  lre = { kind = lre.kind; dependencies = names lre.args.dependencies; };
  trioUtil = {
    inherit (trioUtil.args) version;
    src = { inherit (trioUtil.args.src) pname version hash; };
    dependencies = names trioUtil.args.dependencies;
  };
  shell = names shell.packages;
  shellPython = names (builtins.head shell.packages).packages;
}
"""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _nix_instantiate() -> str:
    nix = shutil.which("nix-instantiate")
    if nix is None:
        pytest.skip("nix-instantiate is missing (Debian: apt-get install nix-bin)")
    return nix


def _evaluate() -> dict[str, object]:
    expression = (
        STUB.replace("ROOT", f"(/. + {json.dumps(str(ROOT))})")
        .replace("LINUX", "[ " + " ".join(f'"{s}"' for s in LINUX) + " ]")
        .replace("PYTHON", "[ " + " ".join(f'"{n}"' for n in PYTHON_PACKAGES) + " ]")
        .replace("TOP", "[ " + " ".join(f'"{n}"' for n in TOP_LEVEL) + " ]")
    )
    proc = subprocess.run(
        [_nix_instantiate(), "--eval", "--strict", "--json", "-E", expression],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_flake_parses() -> None:
    proc = subprocess.run(
        [_nix_instantiate(), "--parse", str(ROOT / "flake.nix")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def test_flake_evaluates_for_linux_with_current_output_names() -> None:
    result = _evaluate()
    assert result["systems"] == {"packages": LINUX, "apps": LINUX, "devShells": LINUX}
    outputs = result["outputs"]
    assert isinstance(outputs, list)
    assert "devShell" not in outputs  # the deprecated name
    assert {"default", "lre", "apps", "devShells", "packages"} <= set(outputs)
    assert result["app"] == "/nix/store/stub-lre-up"


def test_every_runtime_dependency_in_pyproject_is_in_the_flake() -> None:
    with (ROOT / "pyproject.toml").open("rb") as f:
        dependencies = tomllib.load(f)["project"]["dependencies"]
    wanted = {_normal(re.split(r"[<>=!~ ;\[]", dep, maxsplit=1)[0]) for dep in dependencies}
    result = _evaluate()
    lre = result["lre"]
    assert isinstance(lre, dict)
    assert lre["kind"] == "application"
    assert {_normal(name) for name in lre["dependencies"]} == wanted
    # The development shell's Python has them too, and import-linter is the
    # top-level tool (nixpkgs has no Python package of that name).
    shell_python = result["shellPython"]
    assert isinstance(shell_python, list)
    assert wanted <= {_normal(name) for name in shell_python}
    assert "import-linter" in result["shell"]


def test_trio_util_is_built_from_its_pinned_sdist() -> None:
    with (ROOT / "pyproject.toml").open("rb") as f:
        dependencies = tomllib.load(f)["project"]["dependencies"]
    (bound,) = [d for d in dependencies if _normal(d).startswith("trio-util")]
    minimum = bound.split(">=", 1)[1].split(",")[0]
    trio_util = _evaluate()["trioUtil"]
    assert isinstance(trio_util, dict)
    version = trio_util["version"]
    assert tuple(map(int, version.split("."))) >= tuple(map(int, minimum.split(".")))
    src = trio_util["src"]
    assert src["pname"] == "trio_util" and src["version"] == version
    algorithm, _, digest = src["hash"].partition("-")
    assert algorithm == "sha256"
    assert len(base64.b64decode(digest, validate=True)) == 32
    assert trio_util["dependencies"] == ["trio", "async-generator"]
